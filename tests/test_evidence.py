"""Evidence before action, the pure parts: the parsers that scope targets, three-valued checks."""

from __future__ import annotations

import pytest

from conftest import fixture_text
from runbook_runner.errors import ParseError
from runbook_runner.expect import evaluate_check, evaluate_when, outcome
from runbook_runner.observe.fuser import parse_fuser
from runbook_runner.observe.nvidia_smi_q import parse_query
from runbook_runner.observe.state import DeviceHolder, Gpu, HostProcess, Unavailable
from runbook_runner.runbook import RunbookInvalid, loads

# -- nvidia-smi -q ------------------------------------------------------------------------------


def test_q_gives_each_gpu_its_minor_number_which_is_not_always_its_index():
    gpus = parse_query(fixture_text("nvidia-smi/q-535.154.05-8x-rtx4090-procs.txt"))
    assert len(gpus) == 8
    assert [(g.index, g.minor_number) for g in gpus][:3] == [(0, 3), (1, 2), (2, 1)]
    assert gpus[0].pci_bus_id == "00000000:01:00.0"
    assert gpus[1].memory_used_mib == 21_608  # FB memory, not BAR1 (whose Used is 1 MiB or so)
    assert gpus[1].memory_total_mib == 24_564


def test_q_on_an_h200_under_load_and_an_8_gpu_h100():
    (h200,) = parse_query(fixture_text("nvidia-smi/q-590.48.01-h200-load.txt"))
    assert (h200.name, h200.minor_number, h200.memory_used_mib) == ("NVIDIA H200", 0, 32_362)
    h100 = parse_query(fixture_text("nvidia-smi/q-535.161.08-8x-h100.txt"))
    assert [g.minor_number for g in h100] == list(range(8))
    assert h100[7].pci_bus_id == "00000000:DB:00.0"


def test_q_failure_text_is_the_typed_nvidia_smi_failure():
    with pytest.raises(ParseError) as raised:
        parse_query(fixture_text("nvidia-smi/error-driver-not-loaded-rc9.txt"), 9)
    assert getattr(raised.value, "condition", None) == "driver-not-loaded"
    with pytest.raises(ParseError):
        parse_query("", 0)


# -- fuser -v -----------------------------------------------------------------------------------


def test_fuser_real_layout_continuations_and_long_names():
    holders = parse_fuser(fixture_text("fuser/local-psmisc-23.6-v-long-names.txt"))
    assert [(h.device, h.pid) for h in holders] == [
        ("/tmp/eng-fu/nvidia0", 25362),
        ("/tmp/eng-fu/nvidia0", 26225),
        ("/tmp/eng-fu/nvidiactl", 25362),
        ("/tmp/eng-fu/nvidiactl", 26225),
        ("/tmp/eng-fu/nvidia-uvm", 26225),
    ]
    assert [h.minor_number for h in holders] == [0, 0, None, None, None]
    assert [h.node_wide for h in holders] == [False, False, True, True, True]


def test_fuser_8_gpu_holders_per_gpu_and_node_wide():
    holders = parse_fuser(fixture_text("fuser/constructed-8gpu-v.txt"))
    per_gpu = {(h.minor_number, h.pid) for h in holders if not h.node_wide}
    assert per_gpu == {(0, 4120), (0, 4188), (2, 4122), (5, 7001)}
    assert {h.device for h in holders if h.node_wide} == {
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    }
    assert parse_fuser("") == ()  # fuser exits 1 and prints nothing: nobody holds them


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Specified filename /dev/nvidia* does not exist.\n", "no such file: /dev/nvidia*"),
        ("Cannot stat file /proc/1/fd/0: Permission denied\n", "the list is incomplete"),
        ("lsof: WARNING\n", "not a line of fuser -v"),
    ],
)
def test_fuser_output_that_is_not_complete_evidence_is_rejected(text, message):
    with pytest.raises(ParseError, match=message):
        parse_fuser(text)


# -- three values, scoping ----------------------------------------------------------------------

RUNBOOK = loads(
    b"""name: t
title: t
summary: s
parameters:
  idle_mib: {type: integer, default: 1024, description: d}
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
  holders: {command: fuser -v /dev/nvidia* 2>&1, parser: device-holders, ok_exit: [0, 1]}
checks:
  released: {description: d, every: gpus, expect: memory_used_mib <= idle_mib}
  on-failing:
    description: d
    none: holders
    empty: ok
    within: {failing: released, match: minor_number}
goal: [released]
""",
    "t.yaml",
)
PARAMS = {"idle_mib": 1024}


def check(name, **state):
    return evaluate_check(RUNBOOK.checks[name], RUNBOOK, state, PARAMS)


def test_an_unavailable_observation_is_cannot_tell_never_failing():
    result = check("released", gpus=Unavailable("'nvidia-smi -q' exited 127", "not-found"))
    assert (result.ok, result.cannot_tell, result.status) == (False, True, "cannot-tell")
    assert not result.is_failing


def test_every_over_an_empty_list_is_cannot_tell_unless_empty_is_ok():
    assert check("released", gpus=()).status == "cannot-tell"
    assert check(
        "on-failing", gpus=(Gpu(index=0, minor_number=0, memory_used_mib=3),), holders=()
    ).ok


def test_within_keeps_only_the_failing_gpus_holders():
    gpus = (
        Gpu(index=0, minor_number=3, memory_used_mib=96_413),
        Gpu(index=1, minor_number=0, memory_used_mib=500),
    )
    holders = (
        DeviceHolder("/dev/nvidia3", 3, False, 4120, "root", "F...m", "python3"),
        DeviceHolder("/dev/nvidia0", 0, False, 7001, "root", "F...m", "probe"),
        DeviceHolder("/dev/nvidiactl", None, True, 7001, "root", "F....", "probe"),
    )
    result = check("on-failing", gpus=gpus, holders=holders)
    assert result.is_failing
    assert [h.pid for h in result.failing] == [4120]  # minor 3 is GPU 0: not the index


def test_within_cannot_tell_when_the_failing_items_have_no_match_field():
    gpus = (Gpu(index=0, minor_number=None, memory_used_mib=96_413),)
    result = check("on-failing", gpus=gpus, holders=())
    assert result.status == "cannot-tell"
    assert "no minor_number reported" in result.message


def test_outcome_of_several_checks():
    ok = check("released", gpus=(Gpu(index=0, minor_number=0, memory_used_mib=3),))
    failing = check("released", gpus=(Gpu(index=0, minor_number=0, memory_used_mib=9_000),))
    unknown = check("released", gpus=())
    assert outcome([ok, unknown, failing]) == "failing"
    assert outcome([ok, unknown]) == "cannot-tell"
    assert outcome([ok]) == "ok"


def test_condition_reads_a_typed_failure_as_evidence():
    when = (
        loads(
            RUNBOOK_WITH_WHEN,
            "w.yaml",
        )
        .steps[0]
        .when
    )
    assert when is not None
    lost = {"gpus": Unavailable("nvidia-smi failed: a GPU does not answer", "gpu-lost")}
    assert evaluate_when(when, RUNBOOK, lost, PARAMS) is True
    assert evaluate_when(when, RUNBOOK, {"gpus": (Gpu(index=0),)}, PARAMS) is False


RUNBOOK_WITH_WHEN = b"""name: w
title: t
summary: s
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
checks:
  released: {description: d, every: gpus, expect: memory_used_mib < 1024}
goal: [released]
steps:
  - {id: lost, title: t, run: echo lost, when: "gpus.condition == 'gpu-lost'"}
"""


def test_validate_warns_when_a_command_reaches_wider_than_it_declares():
    runbook = loads(
        b"""name: w
title: t
summary: s
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
checks:
  released: {description: d, every: gpus, expect: memory_used_mib < 1024}
goal: [released]
steps:
  - {id: k, title: t, run: nvidia-smi -r, destructive: true, affects: gpu, fixes: goal}
""",
        "w.yaml",
    )
    (warning,) = runbook.warnings
    assert warning.startswith("w.yaml:10:")
    assert "warning: the command reaches wider than 'affects: gpu'" in warning
    assert "declare 'affects: node'" in warning


def test_validate_warns_when_items_include_node_wide_holders():
    runbook = loads(
        b"""name: w
title: t
summary: s
observations:
  holders: {command: fuser -v /dev/nvidia* 2>&1, parser: device-holders, ok_exit: [0, 1]}
checks:
  none-left: {description: d, none: holders, empty: ok}
goal: [none-left]
steps:
  - id: k
    title: t
    run: [kill, -KILL, "{{ item.pid }}"]
    for_each_failing: none-left
    destructive: true
    affects: process
    fixes: goal
""",
        "w.yaml",
    )
    (warning,) = runbook.warnings
    assert warning.startswith("w.yaml:13:")
    assert "holders of /dev/nvidiactl and /dev/nvidia-uvm" in warning


WITHOUT = loads(
    b"""name: t
title: t
summary: s
parameters:
  idle_mib: {type: integer, default: 1024, description: d}
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
  holders: {command: fuser -v /dev/nvidia* 2>&1, parser: device-holders, ok_exit: [0, 1]}
  processes: {command: "ps -eo pid,stat,args", parser: processes}
checks:
  released: {description: d, every: gpus, expect: memory_used_mib <= idle_mib}
  no-d-state: {description: d, none: processes, where: "state == 'D'"}
  holders-gone:
    description: d
    none: holders
    empty: ok
    within: {failing: released, match: minor_number}
  live-holders-gone:
    description: d
    none: holders
    empty: ok
    within: {failing: released, match: minor_number}
    without: {failing: no-d-state, match: pid}
  stuck-holders:
    description: d
    none: processes
    where: "state == 'D'"
    within: {failing: holders-gone, match: pid}
goal: [released]
""",
    "t.yaml",
)


def test_without_drops_the_holders_in_d_state_and_within_may_chain():
    gpus = (Gpu(index=0, minor_number=0, memory_used_mib=96_413),)
    holders = (
        DeviceHolder("/dev/nvidia0", 0, False, 4120, "root", "F...m", "python3"),
        DeviceHolder("/dev/nvidia0", 0, False, 4121, "root", "F...m", "python3"),
    )
    processes = (HostProcess(4120, "D", "D", "python3"), HostProcess(4121, "S", "Sl", "python3"))
    state = {"gpus": gpus, "holders": holders, "processes": processes}
    live = evaluate_check(WITHOUT.checks["live-holders-gone"], WITHOUT, state, PARAMS)
    assert [h.pid for h in live.failing] == [4121]  # 4120 is in D state: no signal reaches it
    stuck = evaluate_check(WITHOUT.checks["stuck-holders"], WITHOUT, state, PARAMS)
    assert [p.pid for p in stuck.failing] == [4120]  # a chained scope: holders of failing GPUs


def test_a_scope_cycle_is_a_load_error():
    text = b"""name: t
title: t
summary: s
observations:
  holders: {command: fuser -v /dev/nvidia* 2>&1, parser: device-holders, ok_exit: [0, 1]}
checks:
  a: {description: d, none: holders, within: {failing: b, match: pid}}
  b: {description: d, none: holders, without: {failing: a, match: pid}}
goal: [a]
"""
    with pytest.raises(RunbookInvalid, match="a cycle"):
        loads(text, "t.yaml")


# -- within: {changed_by: STEP}: put back only what this run took out ---------------------------

RESTORING = b"""name: t
title: t
summary: s
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
checks:
  busy: {description: d, none: gpus, where: memory_used_mib > 1024}
  in-persistence:
    description: d
    none: gpus
    where: persistence_mode == 'Disabled'
    within: {changed_by: persistence-off, match: index}
goal: [busy]
steps:
  - id: persistence-off
    title: t
    for_each_failing: busy
    run: [nvidia-smi, -i, "{{ item.index }}", -pm, "0"]
    destructive: true
    affects: gpu
    fixes: [busy]
  - id: restore
    title: t
    for_each_failing: in-persistence
    run: [nvidia-smi, -i, "{{ item.index }}", -pm, "1"]
    destructive: true
    affects: gpu
    fixes: [in-persistence]
"""


def test_changed_by_keeps_only_the_items_that_step_acted_on_in_this_run():
    runbook = loads(RESTORING, "t.yaml")
    gpus = (
        Gpu(index=2, minor_number=2, memory_used_mib=3, persistence_mode="Disabled"),
        Gpu(index=5, minor_number=5, memory_used_mib=3, persistence_mode="Disabled"),
    )
    check_ = runbook.checks["in-persistence"]
    # Nothing acted on yet (a `runbook check`, or before the step): nothing to put back.
    assert evaluate_check(check_, runbook, {"gpus": gpus}, {}).ok
    # persistence-off took GPU 2 out; GPU 5 was out before the run, by its owner's choice.
    changed = {"persistence-off": [{"index": 2, "name": "H100"}]}
    result = evaluate_check(check_, runbook, {"gpus": gpus}, {}, changed)
    assert [g.index for g in result.failing] == [2]


def test_changed_by_cannot_tell_an_item_that_reports_no_match_field():
    runbook = loads(RESTORING, "t.yaml")
    gpus = (Gpu(index=None, minor_number=2, memory_used_mib=3, persistence_mode="Disabled"),)
    changed = {"persistence-off": [{"index": 2}]}
    result = evaluate_check(runbook.checks["in-persistence"], runbook, {"gpus": gpus}, {}, changed)
    assert result.status == "cannot-tell"
    assert "whether step persistence-off changed it cannot be told" in result.message


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ("{changed_by: persistance-off, match: index}", "unknown step 'persistance-off'; did you"),
        ("{changed_by: restore, match: index}", None),
        ("{changed_by: persistence-off, match: pid}", "'pid' is not a field of both"),
        (
            "{changed_by: persistence-off, failing: busy, match: index}",
            "takes 'failing' (a check) or 'changed_by' (a step), not both",
        ),
        ("{match: index}", "takes 'failing' (a check) or 'changed_by' (a step), and 'match'"),
    ],
)
def test_changed_by_is_checked_at_load_time(scope, message):
    text = RESTORING.replace(b"{changed_by: persistence-off, match: index}", scope.encode())
    if message is None:
        loads(text, "t.yaml")
        return
    with pytest.raises(RunbookInvalid) as raised:
        loads(text, "t.yaml")
    assert any(message in line for line in raised.value.lines), raised.value.lines
    assert all(line.startswith("t.yaml:") for line in raised.value.lines)


def test_changed_by_a_step_that_acts_on_no_items_is_refused():
    text = RESTORING.replace(
        b"  - id: persistence-off\n    title: t\n    for_each_failing: busy\n"
        b'    run: [nvidia-smi, -i, "{{ item.index }}", -pm, "0"]\n',
        b"  - id: persistence-off\n    title: t\n    run: nvidia-smi -pm 0\n",
    )
    with pytest.raises(RunbookInvalid) as raised:
        loads(text, "t.yaml")
    assert any("acts on no items" in line for line in raised.value.lines), raised.value.lines


def test_the_recovery_runbook_starts_again_only_the_services_and_units_it_stopped():
    from conftest import REPO
    from runbook_runner.observe.state import TableRow, TextLine
    from runbook_runner.runbook import load

    runbook = load(REPO / "runbook_runner" / "runbooks" / "gpu-oom-recovery.yaml")
    params = {name: p.default for name, p in runbook.parameters.items()}
    stopped = (TextLine("nvidia-persistenced"), TextLine("nvidia-dcgm"))  # dcgm: off by choice
    units = (
        TableRow(extra=(("unit", "sglang.service"),)),
        TableRow(extra=(("unit", "sglang-canary.service"),)),
    )
    state = {"stopped_gpu_services": stopped, "stopped_units": units}
    changed = {
        "stop-gpu-services": [{"text": "nvidia-persistenced"}],
        "stop-server-unit": [{"unit": "sglang.service", "pid": 4101}],
    }
    services = evaluate_check(
        runbook.checks["gpu-services-running"], runbook, state, params, changed
    )
    assert [item.text for item in services.failing] == ["nvidia-persistenced"]
    server = evaluate_check(runbook.checks["server-unit-running"], runbook, state, params, changed)
    assert [item.unit for item in server.failing] == ["sglang.service"]
    # Before anything was stopped (or in `runbook check`): nothing to start.
    assert evaluate_check(runbook.checks["gpu-services-running"], runbook, state, params).ok


def test_a_failed_observation_names_a_long_command_by_its_observation():
    """A parser's own command is a script of hundreds of characters: the reason a check
    cannot tell names the observation instead, so what went wrong stays readable."""
    from runbook_runner.engine.observing import OBSERVE_IN_C_LOCALE, _said
    from runbook_runner.observe.commands import OWN_COMMANDS

    assert _said("memory", "free -b") == "'free -b'"
    assert _said("memory", OBSERVE_IN_C_LOCALE + "free -b") == "'free -b'"
    assert _said("gpus", OWN_COMMANDS["gpus-detail"].text) == "the command of 'gpus'"
