"""nvidia-smi CSV parsing, fed by real captured output (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import pytest

from conftest import fixture_index, fixture_text
from runbook_runner.errors import ParseError
from runbook_runner.observe import PARSERS
from runbook_runner.observe.nvidia_smi import (
    NvidiaSmiFailure,
    detect_failure,
    parse_compute_apps,
    parse_csv,
    parse_gpus,
    query_from_command,
)

INDEX = fixture_index()


def parse_fixture(name: str):
    meta = INDEX[name]
    query = query_from_command(meta["command"])
    assert query is not None, f"{name}: its command is not a query"
    parser = PARSERS["gpus" if query.kind == "gpu" else "gpu-processes"]
    return parser.parse(fixture_text(name), meta["exit_status"] or 0, meta["command"])


def test_h200_query_gpu_212_columns_maps_by_header_name():
    (gpu,) = parse_fixture("nvidia-smi/csv-query-gpu-590.48.01-h200-load-212cols.txt")
    assert gpu.index == 0
    assert gpu.name == "NVIDIA H200"
    assert gpu.pci_bus_id == "00000000:83:00.0"
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.memory_free_mib) == (
        32362,
        143771,
        110796,
    )
    assert gpu.utilization_gpu_pct == 100.0
    assert gpu.temperature_c == 52.0
    assert gpu.persistence_mode == "Enabled"


@pytest.mark.parametrize(
    ("name", "used", "total", "persistence"),
    [
        ("nvidia-smi/csv-query-gpu-610.57.04-rtx2080super-load-241cols.txt", 815, 8192, "Disabled"),
        # Windows has no persistence mode: "[N/A]" must come out as None.
        ("nvidia-smi/csv-query-gpu-610.62-windows-rtx2080super-idle-239cols.txt", 797, 8192, None),
    ],
)
def test_610_driver_captures(name, used, total, persistence):
    (gpu,) = parse_fixture(name)
    assert gpu.name == "NVIDIA GeForce RTX 2080 SUPER"
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (used, total)
    assert gpu.persistence_mode == persistence


def test_exporter_testdata_units_in_header_and_values():
    gpus = parse_fixture("nvidia-smi/csv-query-gpu-466.63-windows-exporter-testdata.txt")
    assert [g.index for g in gpus] == [0, 1]
    assert [g.memory_used_mib for g in gpus] == [575, 1234]
    assert gpus[1].name == "Some Other GPU"


def test_noheader_nounits_uses_the_query_field_list():
    (gpu,) = parse_fixture("nvidia-smi/csv-noheader-nounits-na-vs-not-supported.txt")
    assert (gpu.memory_total_mib, gpu.memory_free_mib, gpu.memory_used_mib) == (2004, 2004, 0)
    assert gpu.temperature_c == 44.0


def test_not_supported_values_become_none_and_units_are_stripped():
    (gpu,) = parse_fixture("nvidia-smi/csv-noheader-not-supported-gtx770-windows.txt")
    assert gpu.name == "GeForce GTX 770"
    assert gpu.utilization_gpu_pct is None  # "[Not Supported]"
    assert gpu.temperature_c == 52.0


def test_noheader_without_field_list_is_a_parse_error_not_a_guess():
    with pytest.raises(ParseError, match="no header"):
        parse_gpus("0, 96413\n1, 99\n")


def test_the_seed_incident_query_with_noheader():
    text = (
        "0, 96413 MiB\n1, 99 MiB\n2, 96417 MiB\n3, 51 MiB\n4, 3 MiB\n5, 3 MiB\n6, 3 MiB\n7, 7 MiB\n"
    )
    query = query_from_command("nvidia-smi --query-gpu=index,memory.used --format=csv,noheader")
    assert query is not None
    assert not query.header
    gpus = parse_gpus(text, query.fields)
    assert [g.memory_used_mib for g in gpus] == [96413, 99, 96417, 51, 3, 3, 3, 7]


def test_compute_apps_with_processes():
    procs = parse_fixture("nvidia-smi/csv-compute-apps-590.48.01-h200-load.txt")
    assert [(p.pid, p.process_name, p.used_memory_mib) for p in procs] == [
        (10291, "/root/tools/memhog", 2566),
        (10293, "/root/tools/memhog", 1542),
        (10309, "./gpu_burn", 28234),
    ]
    assert procs[0].gpu_bus_id == "00000000:83:00.0"


def test_compute_apps_header_only_means_no_processes():
    assert parse_fixture("nvidia-smi/csv-compute-apps-590.48.01-h200-idle-empty.txt") == ()


def test_compute_apps_on_windows_memory_not_available():
    procs = parse_fixture("nvidia-smi/csv-compute-apps-610.62-windows-na-memory.txt")
    assert len(procs) == 21
    assert all(p.used_memory_mib is None for p in procs)
    edge = [p for p in procs if "msedgewebview2" in (p.process_name or "")]
    assert edge[0].process_name.startswith("C:\\Program Files (x86)\\")


def test_mig_compute_apps_point_at_the_parent_gpu():
    procs = parse_fixture("nvidia-smi/csv-compute-apps-590.48.01-h200-mig-load.txt")
    assert {p.gpu_bus_id for p in procs} == {"00000000:83:00.0"}


def test_process_name_containing_comma_space_is_kept_whole():
    text = "pid, process_name, used_gpu_memory [MiB]\n4242, /opt/a, b/python, 100 MiB\n"
    (proc,) = parse_compute_apps(text)
    assert proc.process_name == "/opt/a, b/python"
    assert proc.used_memory_mib == 100


def test_row_with_too_few_values_is_a_parse_error():
    with pytest.raises(ParseError, match="row 1 has 1 values"):
        parse_csv("index, memory.used [MiB]\n0\n")


def test_non_numeric_memory_is_a_parse_error_naming_the_field():
    with pytest.raises(ParseError, match=r"memory\.used: expected a number"):
        parse_gpus("index, memory.used [MiB]\n0, lots\n")


def test_crlf_line_endings():
    gpus = parse_gpus("index, memory.used [MiB]\r\n0, 5 MiB\r\n")
    assert gpus[0].memory_used_mib == 5


@pytest.mark.parametrize(
    ("name", "condition"),
    [
        ("nvidia-smi/error-driver-not-loaded-rc9.txt", "driver-not-loaded"),
        ("nvidia-smi/error-nvml-driver-library-mismatch-rc18.txt", "driver-library-mismatch"),
        ("nvidia-smi/error-no-devices-found.txt", "no-devices"),
        ("nvidia-smi/error-unable-device-handle-unknown-error.txt", "gpu-lost"),
        ("nvidia-smi/error-gpu-reset-in-use-rc255.txt", "reset-refused"),
        ("nvidia-smi/error-591.86-windows-topo-m-rc255.txt", "bad-option"),
    ],
)
def test_failure_texts_become_a_typed_error(name, condition):
    meta = INDEX[name]
    failure = detect_failure(fixture_text(name), meta["exit_status"] or 0)
    assert failure is not None
    assert failure.condition == condition
    with pytest.raises(NvidiaSmiFailure) as raised:
        parse_gpus(fixture_text(name), ("index", "memory.used"), meta["exit_status"] or 0)
    assert raised.value.condition == condition
    assert "nvidia-smi failed" in str(raised.value)


def test_reset_success_is_not_a_failure():
    assert detect_failure(fixture_text("nvidia-smi/gpu-reset-success.txt"), 0) is None


def test_unknown_output_with_nonzero_exit_is_a_failure_with_the_status():
    failure = detect_failure("something odd\n", 3)
    assert failure is not None
    assert failure.condition == "failed"
    assert "exit status 3" in str(failure)


def test_query_from_command_reads_fields_and_format():
    query = query_from_command(
        "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"
    )
    assert query is not None
    assert (query.kind, query.fields, query.header, query.units) == (
        "compute-apps",
        ("pid", "used_memory"),
        False,
        False,
    )
    assert query_from_command("nvidia-smi") is None


def test_used_memory_alias_is_understood_without_header():
    (proc,) = parse_compute_apps("77, 1024\n", ("pid", "used_memory"))
    assert (proc.pid, proc.used_memory_mib) == (77, 1024)
