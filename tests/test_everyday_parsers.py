"""df, meminfo, systemctl-show, number and table: real output in, typed records out."""

from __future__ import annotations

import dataclasses
import json
import re
import typing

import pytest

from conftest import REPO, fixture_index, fixture_text
from runbook_runner.errors import ParseError
from runbook_runner.observe import PARSERS, reference
from runbook_runner.observe.state import TableRow, field_names

INDEX = fixture_index()
GIB = 1024**3


def parse(parser: str, fixture: str):
    return PARSERS[parser].parse(fixture_text(fixture), 0, INDEX[fixture]["command"])


# -- df ----------------------------------------------------------------------------------


def test_df_output_b1_every_column_in_bytes():
    root, tmp, shm = parse("df", "df/local-coreutils-9.1-B1-output-all.txt")
    assert root.filesystem == "/dev/vda"
    assert root.fstype == "ext4"
    assert root.size_bytes == 270553174016
    assert root.available_bytes == 84894498816
    assert root.use_pct == 23
    assert root.inodes_use_pct == 3
    assert root.inodes == 16777216
    assert tmp.file == "/tmp"
    assert tmp.mounted_on == "/"
    assert shm.mounted_on == "/dev/shm"
    assert shm.used_bytes == 0


def test_df_target_avail_is_what_a_free_space_check_needs():
    (tmp,) = parse("df", "df/local-coreutils-9.1-B1-output-target-avail.txt")
    assert tmp.mounted_on == "/"
    assert tmp.available_bytes == 84894490624
    assert tmp.size_bytes is None  # not asked for: unknown, never zero


@pytest.mark.parametrize(
    "fixture",
    ["df/local-coreutils-9.1-P.txt", "df/local-coreutils-9.1-default.txt"],
)
def test_df_kib_blocks_become_bytes(fixture):
    root = parse("df", fixture)[0]
    assert root.size_bytes == 264212084 * 1024
    assert root.use_pct == 23
    assert root.mounted_on == "/"


def test_df_posix_with_b1_and_human_sizes():
    assert parse("df", "df/local-coreutils-9.1-P-B1.txt")[0].size_bytes == 270553174016
    root, shm = parse("df", "df/local-coreutils-9.1-h.txt")
    assert root.size_bytes == 252 * GIB
    assert shm.used_bytes == 0


def test_df_mount_point_with_spaces_and_a_wrapped_device_name():
    text = (
        "Filesystem     1024-blocks  Used Available Capacity Mounted on\n"
        "/dev/mapper/vg0-a-very-long-logical-volume-name\n"
        "                   1000   10       990       1% /mnt/my disk\n"
    )
    (fs,) = PARSERS["df"].parse(text, 0, "df -P")
    assert fs.filesystem == "/dev/mapper/vg0-a-very-long-logical-volume-name"
    assert fs.mounted_on == "/mnt/my disk"
    assert fs.size_bytes == 1024000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Sys. de fichiers blocs de 1K Utilisé Disponible Uti% Monté sur\n/dev/vda 1 1 1 1% /\n",
        "Filesystem 1B-blocks Used\n/dev/vda 12 lots\n",
        "Filesystem 1B-blocks Used\n/dev/vda 12\n",
        "Filesystem Use%\n/dev/vda 23\n",
        "total 12\n",
    ],
)
def test_df_refuses_what_it_does_not_recognise(text):
    with pytest.raises(ParseError):
        PARSERS["df"].parse(text, 0, "df")


# -- meminfo ------------------------------------------------------------------------------


def test_meminfo_kb_becomes_bytes():
    info = parse("meminfo", "meminfo/local-debian12-kernel6.18-meminfo.txt")
    text = fixture_text("meminfo/local-debian12-kernel6.18-meminfo.txt")
    kb = int(re.search(r"MemAvailable:\s+(\d+) kB", text)[1])
    assert info.mem_available_bytes == kb * 1024
    assert info.mem_total_bytes == 24684100 * 1024
    assert info.huge_pages_total == 0  # no unit: a count, not bytes
    assert info.direct_map4k_bytes is not None  # a key outside the declared list


def test_meminfo_of_an_old_kernel_has_no_available():
    info = parse("meminfo", "meminfo/procfs-fixture-meminfo-no-memavailable.txt")
    assert info.mem_available_bytes is None
    assert info.mem_total_bytes is not None


def test_meminfo_reads_other_key_value_files():
    status = parse("meminfo", "meminfo/local-proc-self-status.txt")
    assert status.vm_rss_bytes == 1728 * 1024
    assert status.name == "cat"
    assert status.state == "R (running)"
    assert status.umask == "0022"
    assert status.threads == 1
    assert status.not_a_key is None


@pytest.mark.parametrize("text", ["", "MemTotal 123 kB\n", "MemTotal: lots kB\n"])
def test_meminfo_refuses_what_it_does_not_recognise(text):
    with pytest.raises(ParseError):
        PARSERS["meminfo"].parse(text, 0, "cat /proc/meminfo")


# -- systemctl show -----------------------------------------------------------------------


def test_systemctl_show_active_and_not_found():
    active = parse("systemctl-show", "systemctl/constructed-nvidia-persistenced-active.txt")
    assert active.active_state == "active"
    assert active.sub_state == "running"
    assert active.main_pid == 1873
    assert active.memory_current_bytes == 1220608
    assert active.restart == "always"  # a property outside the declared list
    missing = parse("systemctl-show", "systemctl/constructed-dcgm-exporter-not-found.txt")
    assert missing.load_state == "not-found"
    assert missing.memory_current_bytes is None
    assert missing.unit_file_state is None
    failed = parse("systemctl-show", "systemctl/constructed-sglang-failed-short.txt")
    assert failed.nrestarts == 5
    assert failed.result == "exit-code"
    assert failed.id is None


@pytest.mark.parametrize(
    "text",
    ["", "ActiveState active\n", "MainPID=lots\n", "ActiveState=active\n\nActiveState=failed\n"],
)
def test_systemctl_show_refuses_what_it_does_not_recognise(text):
    with pytest.raises(ParseError):
        PARSERS["systemctl-show"].parse(text, 0, "systemctl show x")


# -- number ------------------------------------------------------------------------------


def test_number_from_a_single_line():
    assert parse("number", "number/local-nproc.txt").value == 2
    assert parse("number", "number/local-pid-max.txt").value == 32768
    assert PARSERS["number"].parse("96413 MiB\n", 0, "x").unit == "MiB"
    assert PARSERS["number"].parse(" -0.5\n", 0, "x").value == -0.5


@pytest.mark.parametrize("text", ["", "1\n2\n", "12 apples and pears\n", "nan\n", "1e309\n"])
def test_number_refuses_what_it_does_not_recognise(text):
    with pytest.raises(ParseError):
        PARSERS["number"].parse(text, 0, "x")


def test_number_refuses_a_line_of_several_numbers():
    with pytest.raises(ParseError, match="expected a number"):
        parse("number", "number/local-loadavg-not-a-number.txt")


# -- table -------------------------------------------------------------------------------


def test_table_fields_are_named_from_the_header():
    zram, vda = parse("table", "table/local-lsblk.txt")
    assert (vda.name, vda.maj_min, vda.size, vda.type, vda.mountpoints) == (
        "vda",
        "254:0",
        "256G",
        "disk",
        "/",
    )
    assert zram.mountpoints is None  # an empty last cell
    shell, sleep = parse("table", "table/local-ps-o.txt")
    assert shell.stat == "Ss"
    assert sleep.cpu == "0.0"
    assert sleep.command == "sleep"


@pytest.mark.parametrize("text", ["", "NAME NAME\nx y\n", "1 2 3\n4 5 6\n"])
def test_table_refuses_what_it_does_not_recognise(text):
    with pytest.raises(ParseError):
        PARSERS["table"].parse(text, 0, "lsblk")


# -- one place documents every parser's fields ----------------------------------------------


def test_every_new_record_is_a_frozen_dataclass_with_precise_annotations():
    for name in ("df", "meminfo", "systemctl-show", "number", "table"):
        record = PARSERS[name].record_type
        assert dataclasses.is_dataclass(record)
        assert record.__dataclass_params__.frozen
        hints = typing.get_type_hints(record)
        for field in field_names(record):
            assert type(None) in typing.get_args(hints[field]), (name, field)


def test_the_format_page_and_the_schema_say_what_the_records_say():
    page = (REPO / reference.PAGE).read_text()
    assert reference.readme_with_table(page) == page, (
        "the parser table of docs/manual/runbook-format.md is stale: "
        "python3 -m runbook_runner.observe.reference --write"
    )
    schema = json.loads((REPO / "runbook_runner/schema/runbook.schema.json").read_text())
    parser = schema["$defs"]["observation"]["properties"]["parser"]
    assert parser["enum"] == list(PARSERS)
    assert parser["description"] == reference.schema_description()
    for doc in reference.parsers():
        for field in doc.fields:
            assert f"`{field.name}`" in page


def test_table_rows_type_check_as_text():
    assert reference.parsers()[-1].open_fields == "str | None"
    assert TableRow(extra=(("type", "disk"),)).type == "disk"
