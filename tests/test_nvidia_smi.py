"""nvidia-smi CSV parsing, fed by real captured output (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import re

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


# -- one sick GPU is one GPU (issue 33) ------------------------------------------------------

from runbook_runner.observe import nvidia_mig, nvidia_smi_q  # noqa: E402
from runbook_runner.simhost import render  # noqa: E402
from runbook_runner.simhost.commands import Env  # noqa: E402
from runbook_runner.simhost.hosts import mig_gpu1_in_use, oom_crash  # noqa: E402
from runbook_runner.simhost.model import SimProcess  # noqa: E402
from runbook_runner.simhost.simulated import SimClock, SimProcesses  # noqa: E402

HANDLE_LOST = fixture_text("nvidia-smi/error-unable-device-handle-unknown-error.txt")
GPU_QUERY = "nvidia-smi --query-gpu=index,pci.bus_id,memory.used --format=csv,noheader"


def test_a_gpu_whose_fields_answer_a_fault_is_that_gpus_fault_not_the_nodes():
    text = (
        "0, 00000000:18:00.0, 3 MiB\n"
        "1, 00000000:28:00.0, [Unknown Error]\n"
        "2, 00000000:38:00.0, [GPU requires reset]\n"
        "3, 00000000:48:00.0, [GPU is lost]\n"
    )
    gpus = PARSERS["gpus"].parse(text, 0, GPU_QUERY)
    assert [(g.index, g.fault) for g in gpus] == [
        (0, ""),
        (1, "unknown-error"),
        (2, "reset-required"),
        (3, "gpu-lost"),
    ]
    assert gpus[0].memory_used_mib == 3
    assert gpus[1].memory_used_mib is None
    assert gpus[3].pci == "0000:48:00"  # as the kernel's Xid lines write it


def test_a_device_handle_line_among_rows_is_one_gpu_with_its_index_from_bus_order():
    # The real line (a 4-digit domain, no space after GPU) for the GPU at 07:00.0, between
    # the rows of the GPUs before and after it on the bus.
    text = "0, 00000000:03:00.0, 5 MiB\n" + HANDLE_LOST + "\n2, 00000000:0B:00.0, 7 MiB\n"
    gpus = PARSERS["gpus"].parse(text, 15, GPU_QUERY)
    assert [(g.index, g.pci_bus_id, g.fault) for g in gpus] == [
        (0, "00000000:03:00.0", ""),
        (1, "00000000:07:00.0", "unknown-error"),
        (2, "00000000:0B:00.0", ""),
    ]


def test_only_the_device_handle_line_is_still_a_failure_of_the_command():
    with pytest.raises(NvidiaSmiFailure) as raised:
        PARSERS["gpus"].parse(HANDLE_LOST, 0, GPU_QUERY)
    assert raised.value.condition == "gpu-lost"


def test_a_per_gpu_retry_that_timed_out_is_that_gpu_alone():
    q = fixture_text("nvidia-smi/q-590.48.01-h200-load.txt")
    text = (
        "@@ nvidia-smi -q gave no answer in 20 s: asking each GPU\n"
        + q
        + ("@@ timed-out 0000:19:00.0\n")
    )
    gpus = nvidia_smi_q.parse_query(text, 0)
    assert [(g.index, g.pci_bus_id, g.fault) for g in gpus] == [
        (0, "00000000:19:00.0", "timed-out"),
        (1, "00000000:83:00.0", ""),
    ]
    assert gpus[1].memory_used_mib == 32362


def test_q_reads_mig_mode_devices_and_processes_per_instance():
    (mig,) = nvidia_smi_q.parse_query(fixture_text("nvidia-smi/q-590.48.01-h200-mig-idle.txt"))
    assert (mig.mig_mode, mig.mig_devices, mig.mig_processes) == ("Enabled", 5, 0)
    (whole,) = nvidia_smi_q.parse_query(fixture_text("nvidia-smi/q-590.48.01-h200-load.txt"))
    assert (whole.mig_mode, whole.mig_devices, whole.mig_processes) == ("Disabled", 0, 0)
    processes = nvidia_smi_q.parse_processes(fixture_text("nvidia-smi/q-590.48.01-h200-load.txt"))
    assert [(p.pid, p.used_memory_mib, p.gpu_instance_id) for p in processes] == [
        (10291, 2566, None),
        (10293, 1542, None),
        (10309, 28234, None),
    ]


def test_mig_listings_from_real_output():
    devices = nvidia_mig.parse_list(fixture_text("nvidia-smi/list-590.48.01-h100-mig.txt"))
    assert [(d.gpu, d.mig_index, d.name) for d in devices] == [
        (0, None, "NVIDIA H100 80GB HBM3"),
        (0, 0, "3g.40gb"),
        (0, 1, "2g.20gb"),
        (0, 2, "1g.10gb"),
        (0, 3, "1g.10gb"),
    ]
    many = nvidia_mig.parse_list(fixture_text("nvidia-smi/list-8x-h100-7mig-each.txt"))
    assert sum(d.mig_index is not None for d in many) == 56
    assert len(nvidia_mig.parse_list(fixture_text("nvidia-smi/list-590.48.01-h200.txt"))) == 1
    gis = nvidia_mig.parse_gpu_instances(fixture_text("nvidia-smi/mig-lgi-a100-2x3g.txt"))
    assert [(g.gpu, g.profile, g.profile_id, g.instance_id, g.placement) for g in gis] == [
        (0, "MIG 3g.20gb", 9, 1, "4:4"),
        (0, "MIG 3g.20gb", 9, 2, "0:4"),
    ]
    cis = nvidia_mig.parse_compute_instances(fixture_text("nvidia-smi/mig-lci-a100-2x1c.txt"))
    assert [(c.gpu, c.gpu_instance_id, c.profile, c.instance_id) for c in cis] == [
        (0, 1, "MIG 1c.3g.20gb", 0),
        (0, 2, "MIG 1c.3g.20gb", 0),
    ]
    assert nvidia_mig.parse_gpu_instances("No MIG-enabled devices found.\n", 6) == ()
    with pytest.raises(ParseError):
        nvidia_mig.parse_compute_instances("| 0 what is this |\n")


# -- the simulated nvidia-smi answers as the real one does (issue 36) ------------------------


def simulated(host, *args: str) -> tuple[str, int]:
    env = Env(host, SimProcesses(host, SimClock()))
    status = render_call(env, list(args))
    return "".join(env.stdout), status


def render_call(env, args):
    from runbook_runner.simhost.gpu_tools import nvidia_smi

    return nvidia_smi(env, args)


CAPTURE_FIELDS = (
    "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory"
)


# What varies between two hosts in a --query-compute-apps row, each cell by its kind; the
# rest (the header, the order of the cells, ", " between them, " MiB", the line ends) is
# the format, compared byte for byte.
_CELLS = (
    ("<time>", re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}")),
    ("<bus id>", re.compile(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]")),
    ("<uuid>", re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")),
    ("<n> MiB", re.compile(r"\d+ MiB")),
    ("<n>", re.compile(r"\d+")),
    ("<name>", re.compile(r"[^\s\[,][^,]*")),  # a GPU's or a program's name, not [N/A]
)


def shape(text: str) -> str:
    """The header as printed; each row with its cells by kind (a cell of no kind as is)."""
    header, *rows = text.split("\n")

    def kind(cell: str) -> str:
        return next((k for k, pattern in _CELLS if pattern.fullmatch(cell)), cell)

    return "\n".join([header, *(", ".join(map(kind, r.split(", "))) if r else r for r in rows)])


def test_i_n_query_compute_apps_answers_only_that_gpu_in_the_format_the_real_one_prints():
    """Done means (issue 36): `nvidia-smi -i N --query-compute-apps=...` on the simulated
    host, against the real capture of the same query (an H200, driver 590.48.01; serial and
    UUID masked by the collector). There is no real capture of the -i form: -i only selects
    the GPUs, so GPU N's rows are the capture's rows when GPU N runs the capture's processes."""
    real = fixture_text("nvidia-smi/csv-compute-apps-590.48.01-h200-load.txt")
    idle = fixture_text("nvidia-smi/csv-compute-apps-590.48.01-h200-idle-empty.txt")
    real_header, *real_rows = real.splitlines()
    host = oom_crash()
    host.processes = [  # GPU 2 runs what the captured H200 ran; GPUs 0 and 3 run others
        SimProcess(pid=4120, cmdline="sglang::scheduler_TP0", gpu_mib={"0": 90_112}),
        SimProcess(pid=10291, cmdline="/root/tools/memhog 2560", gpu_mib={"2": 2_566}),
        SimProcess(pid=10293, cmdline="/root/tools/memhog 1536", gpu_mib={"2": 1_542}),
        SimProcess(pid=10309, cmdline="./gpu_burn -d 60", gpu_mib={"2": 28_234}),
        SimProcess(pid=4123, cmdline="python3 train.py", gpu_mib={"0": 1_024, "3": 2_048}),
    ]
    query = f"--query-compute-apps={CAPTURE_FIELDS}"

    text, status = simulated(host, "-i", "2", query, "--format=csv")
    assert status == 0
    assert shape(text) == shape(real)  # the real format, byte for byte
    assert text.splitlines()[0] == real_header
    # The process cells are the capture's own; the GPU's are GPU 2's (not GPU 0's or 3's).
    rows = [row.split(", ") for row in text.splitlines()[1:]]
    assert [r[5:] for r in rows] == [r.split(", ")[5:] for r in real_rows]
    gpu = host.gpu(2)
    assert {(r[1], r[2], r[3], r[4]) for r in rows} == {
        (gpu.name, gpu.bus_id, gpu.serial, gpu.uuid)
    }
    parsed = PARSERS["gpu-processes"].parse(text, status, f"nvidia-smi -i 2 {query} --format=csv")
    assert [(p.pid, p.used_memory_mib, p.gpu_bus_id) for p in parsed] == [
        (10291, 2_566, gpu.bus_id),
        (10293, 1_542, gpu.bus_id),
        (10309, 28_234, gpu.bus_id),
    ]

    # A GPU with no process: the header alone, byte for byte; without the header, nothing.
    assert simulated(host, "-i", "5", query, "--format=csv") == (idle, 0)
    assert simulated(host, "--id=5", query, "--format=csv,noheader") == ("", 0)

    # A list: one header, then each GPU's rows in the GPUs' order.
    one = simulated(host, "-i", "0", query, "--format=csv")[0]
    listed, status = simulated(host, "-i", "2,0", query, "--format=csv")
    assert status == 0
    assert listed == one + text.split("\n", 1)[1]
    assert shape(listed).split("\n")[1:] == [shape(real).split("\n")[1]] * 5 + [""]

    # noheader drops the header line alone; nounits drops " MiB" from the values alone
    # (bare numbers: csv-noheader-nounits-na-vs-not-supported.txt).
    bare = "".join(line + "\n" for line in text.splitlines()[1:])
    assert simulated(host, "-i", "2", query, "--format=csv,noheader") == (bare, 0)
    no_units = bare.replace(" MiB\n", "\n")
    assert simulated(host, "-i", "2", query, "--format=csv,noheader,nounits") == (no_units, 0)

    everywhere, _ = simulated(host, query, "--format=csv")
    assert len(everywhere.splitlines()) == 1 + 6  # without -i: every GPU's


def test_i_selects_by_index_bus_id_and_uuid_and_refuses_what_names_no_gpu():
    host = oom_crash()
    query = ["--query-gpu=index", "--format=csv,noheader"]
    assert simulated(host, "-i", "3", *query) == ("3\n", 0)
    assert simulated(host, "-i", "0000:28:00.0", *query) == ("1\n", 0)
    assert simulated(host, "--id=0,2", *query) == ("0\n2\n", 0)
    assert simulated(host, "-i", host.gpu(5).uuid, *query) == ("5\n", 0)
    assert simulated(host, "-i", "9", *query) == ("No devices were found\n", 6)


def test_q_sections_and_i_as_the_real_one_prints_them():
    host = oom_crash()
    text, status = simulated(host, "-q", "-d", "MEMORY", "-i", "2")
    assert status == 0
    assert text.count("\nGPU ") == 1
    assert "FB Memory Usage" in text
    assert "Minor Number" not in text
    (gpu,) = nvidia_smi_q.parse_query(text)
    assert (gpu.pci_bus_id, gpu.memory_used_mib) == (host.gpu(2).bus_id, 3 + 96_410)
    assert "Remapped Rows" in simulated(host, "-q", "-d", "ROW_REMAPPER,ECC", "-i", "0")[0]
    assert simulated(host, "-q", "-d", "NOPE")[1] == 2


def test_the_simulated_host_answers_per_gpu_for_a_lost_or_faulted_gpu():
    host = oom_crash()
    host.gpu(3).lost = True
    host.gpu(5).fault = "unknown-error"
    text, status = simulated(
        host, "--query-gpu=index,pci.bus_id,memory.used", "--format=csv,noheader"
    )
    assert status == 15
    assert "Unable to determine the device handle for GPU0000:48:00.0: Unknown Error" in text
    gpus = PARSERS["gpus"].parse(text, status, GPU_QUERY)
    assert [g.fault for g in gpus] == ["", "", "", "unknown-error", "", "unknown-error", "", ""]
    assert [g.index for g in gpus] == list(range(8))  # the lost one in its place on the bus
    assert [g.fault for g in nvidia_smi_q.parse_query(*simulated(host, "-q"))][3:6] == [
        "unknown-error",
        "",
        "unknown-error",
    ]
    assert simulated(host, "-i", "4", "--query-gpu=index", "--format=csv,noheader") == ("4\n", 0)
    assert simulated(host)[1] == 15  # the table: the whole command fails, as reported
    host.reset(host.gpu(5))
    assert host.gpu(5).fault == ""


def test_the_simulated_mig_gpu_lists_its_instances_and_processes_per_instance():
    host = mig_gpu1_in_use()
    gis = nvidia_mig.parse_gpu_instances(simulated(host, "mig", "-lgi")[0])
    assert [(g.gpu, g.instance_id, g.placement) for g in gis] == [(1, 1, "4:4"), (1, 2, "0:4")]
    cis = nvidia_mig.parse_compute_instances(simulated(host, "mig", "-lci", "-i", "1")[0])
    assert [(c.gpu, c.gpu_instance_id, c.instance_id) for c in cis] == [(1, 1, 0), (1, 2, 0)]
    assert simulated(host, "mig", "-lgi", "-i", "0") == (render.NO_MIG, 6)
    devices = nvidia_mig.parse_list(simulated(host, "-L", "-i", "1")[0])
    assert [d.mig_index for d in devices] == [None, 0, 1]
    processes = nvidia_smi_q.parse_processes(simulated(host, "-q", "-d", "PIDS")[0])
    assert [(p.pid, p.gpu_instance_id, p.compute_instance_id) for p in processes] == [(7301, 1, 0)]
    gpus = nvidia_smi_q.parse_query(simulated(host, "-q")[0])
    assert [(g.index, g.mig_mode, g.mig_processes) for g in gpus][:3] == [
        (0, "Disabled", 0),
        (1, "Enabled", 1),
        (2, "Disabled", 0),
    ]
    host.processes.clear()
    host.reset(host.gpu(1))
    assert host.gpu(1).mig == []  # a reset destroys the instances


def test_the_gpus_query_that_hangs_is_asked_again_gpu_by_gpu_with_its_own_timeout(tmp_path):
    """gpu-oom-recovery's gpus observation: the whole `nvidia-smi -q` hangs (one GPU hangs
    the driver), so each GPU the driver lists is asked alone; the one that hangs again is
    that GPU's fault, and the others are read. Run in bash with a stand-in nvidia-smi; the
    script's timeouts (20 s, 8 s) and its /proc folder are made small and local."""
    import os
    import subprocess

    from conftest import REPO
    from runbook_runner.runbook import load

    command = load(REPO / "runbooks" / "gpu-oom-recovery.yaml").observations["gpus"].command
    assert command is not None
    script = command.render(lambda name: "")
    assert "timeout 20 nvidia-smi -q" in script
    assert "timeout 8 nvidia-smi -q -i" in script
    gpus_dir = tmp_path / "gpus"
    for bus in ("0000:18:00.0", "0000:28:00.0", "0000:38:00.0"):
        (gpus_dir / bus).mkdir(parents=True)
    script = (
        script.replace("timeout 20 ", "timeout 1 ")
        .replace("timeout 8 ", "timeout 1 ")
        .replace("/proc/driver/nvidia/gpus", str(gpus_dir))
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *0000:28:00.0*|-q) exec sleep 30;; esac\n'
        "bus=${3#0000:}\n"
        'printf "\\n==============NVSMI LOG==============\\n\\nAttached GPUs : 3\\n"\n'
        'printf "GPU 00000000:%s\\n    Minor Number : 0\\n    FB Memory Usage\\n" "$bus"\n'
        'printf "        Total : 97887 MiB\\n        Used : 3 MiB\\n"\n'
    )
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    gpus = PARSERS["gpus-detail"].parse(done.stdout, done.returncode, "nvidia-smi -q")
    assert [(g.index, g.pci_bus_id, g.fault, g.memory_used_mib) for g in gpus] == [
        (0, "00000000:18:00.0", "", 3),
        (1, "00000000:28:00.0", "timed-out", None),
        (2, "00000000:38:00.0", "", 3),
    ], done.stdout
