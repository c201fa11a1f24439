"""Loading runbooks: every error with file:line:col, before anything runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from conftest import REPO, TESTS
from runbook_runner.format import schema
from runbook_runner.format.parameters import ParameterError, resolve_parameters
from runbook_runner.runbook import RunbookInvalid, load, loads
from runbook_runner.status import OnFailure

BROKEN = sorted((TESTS / "broken-runbooks").glob("*.yaml"))
SHIPPED = sorted((REPO / "runbooks").glob("*.yaml"))


def expected_errors(path: Path) -> list[str]:
    return [
        line[len("# expect: ") :].rstrip("\n")
        for line in path.open()
        if line.startswith("# expect: ")
    ]


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_broken_runbook_reports_every_error_with_its_position(path):
    with pytest.raises(RunbookInvalid) as raised:
        load(path)
    prefix = f"{raised.value.filename}:"
    got = [line.removeprefix(prefix) for line in raised.value.lines]
    assert all(line.startswith(prefix) for line in raised.value.lines)
    assert got == expected_errors(path)


def test_the_broken_corpus_covers_each_kind_of_error():
    messages = "\n".join(line for path in BROKEN for line in expected_errors(path))
    for kind in [
        "YAML syntax error",
        "duplicate key",
        "unknown key",
        "expected a number",
        "missing required key",
        "unknown check",
        "unknown parameter",
        "unknown name",
        "differs from the file name",
        "in expression",
        "is not allowed",  # a YAML tag that would construct Python objects
        "an owner-blind signal",  # pkill -f PATTERN: no observed item, no owner to check
        "whose reach the runner can tell",  # a destructive wrapper script
    ]:
        assert kind in messages, kind


def test_python_tags_never_construct_objects(tmp_path):
    marker = tmp_path / "pwned"
    text = f'name: x\nsummary: !!python/object/apply:os.system ["touch {marker}"]\n'
    with pytest.raises(RunbookInvalid):
        loads(text.encode(), "x.yaml", stem="x")
    assert not marker.exists()


def test_not_utf8_is_an_error_with_a_position():
    with pytest.raises(RunbookInvalid) as raised:
        loads(b"name: \xff\xfe\n", "bin.yaml")
    assert re.match(r"bin\.yaml:1:1: not UTF-8", raised.value.lines[0])


def test_unreadable_file_is_an_error_not_a_traceback(tmp_path):
    with pytest.raises(RunbookInvalid) as raised:
        load(tmp_path / "missing.yaml")
    assert "cannot read the file" in raised.value.lines[0]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_runbooks_are_valid_and_point_editors_at_the_schema(path):
    runbook = load(path)
    assert runbook.name == path.stem
    first_line = path.read_text().splitlines()[0]
    match = re.match(r"# yaml-language-server: \$schema=(\S+)$", first_line)
    assert match, "first line should name the schema for editors"
    assert (path.parent / match.group(1)).resolve() == Path(schema.schema_path()).resolve()


def test_schema_is_a_valid_json_schema():
    Draft202012Validator.check_schema(schema.schema())


def test_blast_radius_is_the_widest_destructive_step():
    text = b"""
name: ladder
title: t
summary: s
observations: {memory: {command: free -b, parser: free}}
checks: {ok: {description: d, expect: memory.free_bytes > 0}}
goal: [ok]
steps:
  - {id: stop, title: stop, run: rm -f /tmp/x, destructive: true, affects: files, fixes: goal}
  - {id: reset, title: reset, run: nvidia-smi -r, destructive: true, affects: gpu, skip_if: goal, fixes: [ok]}
  - {id: look, title: look, run: "true"}
"""
    runbook = loads(text, "ladder.yaml", stem="ladder")
    assert runbook.blast_radius == "gpu"
    assert runbook.destructive
    assert runbook.step("reset").skip_if == ("ok",)  # "goal" expands to the goal's checks


def _health():
    return load(REPO / "runbooks" / "gpu-node-health.yaml")


def test_parameters_take_defaults_and_typed_overrides():
    values = resolve_parameters(_health(), ["idle_mib=100", "min_available_fraction=0.5"])
    assert values["idle_mib"] == 100
    assert values["min_available_fraction"] == 0.5
    assert values["min_gpus"] == 1


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("idle_mb=5", "has no parameter 'idle_mb'; did you mean 'idle_mib'?"),
        ("idle_mib=lots", "expected integer"),
        ("idle_mib=-1", "must be at least 0"),
        ("min_available_fraction=2", "must be at most 1"),
        ("idle_mib", "expected NAME=VALUE"),
    ],
)
def test_bad_parameter_values_are_clear_errors(assignment, message):
    with pytest.raises(ParameterError) as raised:
        resolve_parameters(_health(), [assignment])
    assert message in str(raised.value)


def test_every_bad_parameter_is_reported_at_once():
    with pytest.raises(ParameterError) as raised:
        resolve_parameters(_health(), ["idle_mib=x", "nope=1"])
    assert len(raised.value.lines) == 2


LADDERS = """\
name: x
title: t
summary: s
observations:
  gpus: {command: nvidia-smi -q, parser: gpus-detail}
checks:
  held: {description: d, every: gpus, expect: memory_used_mib <= 10}
goal: [held]
steps:
  - id: look
    title: Look
    run: nvidia-smi
  - ladder: gpu
    root: true
    destructive: true
    rungs:
      - id: reset
        title: Reset
        run: [nvidia-smi, --gpu-reset, -i, "{{ item.index }}"]
        affects: gpu
        runs: {for_each_failing: held, fixes: [held], skip_if: goal}
      - id: last
        title: Last
        run: reboot
        affects: node
        runs: {fixes: goal}
        on_failure: stop
"""


def test_a_ladder_loads_as_flat_steps_with_a_ladders_defaults():
    from runbook_runner.runbook import loads

    runbook = loads(LADDERS.encode(), "x.yaml", stem="x")
    look, reset, last = runbook.steps
    assert [s.id for s in runbook.steps] == ["look", "reset", "last"]
    assert (look.ladder, look.on_failure, look.root) == ("", OnFailure.STOP, False)
    assert (reset.ladder, reset.root, reset.destructive) == ("gpu", True, True)
    assert look.on_failure is OnFailure.STOP
    assert reset.on_failure is OnFailure.CONTINUE
    assert (reset.for_each_failing, reset.fixes, reset.skip_if) == ("held", ("held",), ("held",))
    assert (last.on_failure, last.fixes) == (OnFailure.STOP, ("held",))
    assert reset.run is not None
    assert reset.run.source == "nvidia-smi --gpu-reset -i {{ item.index }}"


def test_an_error_in_a_rung_names_the_rung_and_its_line():
    from runbook_runner.runbook import RunbookInvalid, loads

    broken = LADDERS.replace("runs: {for_each_failing: held,", "runs: {for_each_failing: hold,")
    broken = broken.replace("      - id: last\n", "      - id: last\n        fixes: goal\n")
    with pytest.raises(RunbookInvalid) as raised:
        loads(broken.encode(), "x.yaml", stem="x")
    assert raised.value.lines == [
        "x.yaml:21:34: steps[1].rungs[0].runs.for_each_failing: unknown check 'hold'; "
        "did you mean 'held'?",
        "x.yaml:23:16: steps[1].rungs[1].fixes: 'fixes' is given twice: in 'runs' and beside "
        "it; say it once",
    ]


def test_a_ladder_with_an_unknown_key_is_refused_by_name():
    from runbook_runner.runbook import RunbookInvalid, loads

    with pytest.raises(RunbookInvalid) as raised:
        loads(LADDERS.replace("    root: true\n", "    rot: true\n").encode(), "x.yaml", stem="x")
    assert raised.value.lines == [
        "x.yaml:14:5: steps[1].rot: unknown key 'rot'; did you mean 'root'?"
    ]


def test_a_ladders_affects_is_every_rungs_unless_the_rung_says_its_own():
    from runbook_runner.runbook import loads

    text = LADDERS.replace("    destructive: true\n", "    destructive: true\n    affects: gpu\n")
    text = text.replace("        affects: gpu\n", "")
    runbook = loads(text.encode(), "x.yaml", stem="x")
    _, reset, last = runbook.steps
    assert (reset.affects, last.affects) == ("gpu", "node")


def test_a_destructive_rung_with_no_affects_of_its_own_nor_its_ladders_is_refused():
    from runbook_runner.runbook import RunbookInvalid, loads

    with pytest.raises(RunbookInvalid) as raised:
        loads(LADDERS.replace("        affects: gpu\n", "").encode(), "x.yaml", stem="x")
    assert raised.value.lines == [
        "x.yaml:17:9: steps[1].rungs[0]: a destructive step must say what it 'affects': "
        "process, service, gpu or node"
    ]


def test_a_ladders_affects_outside_the_blast_radii_is_refused_at_its_line():
    from runbook_runner.runbook import RunbookInvalid, loads

    text = LADDERS.replace("    destructive: true\n", "    destructive: true\n    affects: rack\n")
    with pytest.raises(RunbookInvalid) as raised:
        loads(text.encode(), "x.yaml", stem="x")
    assert raised.value.lines == [
        "x.yaml:16:14: steps[1].affects: must be one of: process, service, gpu, files, node; "
        "got the string 'rack'"
    ]


def test_the_recovery_runbook_reads_as_its_ladders():
    """The grouping of the shipped recovery runbook, as its summary tells it."""
    runbook = load(REPO / "runbooks" / "gpu-oom-recovery.yaml")
    groups: list[tuple[str, list[str]]] = []
    for step in runbook.steps:
        if groups and groups[-1][0] == step.ladder:
            groups[-1][1].append(step.id)
        else:
            groups.append((step.ladder, [step.id]))
    assert [name for name, _ in groups] == [
        "look",
        "short-cuts",
        "gpu",
        "host-memory",
        "short-cuts",
        "gpu",
        "put-back",
        "",
    ]
    assert groups[2][1] == [
        "end-mps-clients",
        "stop-crash-looping-unit",
        "stop-server-unit",
        "stop-server",
        "kill-server",
    ]
    assert groups[-1][1] == ["reboot"]
    reboots = [s for s in runbook.steps if s.reboots]
    assert all(s.on_failure == "stop" for s in reboots)  # a reboot that failed ends the run


OWN = """\
name: x
title: t
summary: s
observations:
  gpus: {parser: gpus-detail}
  holders: {parser: device-holders}
checks:
  held: {description: d, every: gpus, expect: memory_used_mib <= 10}
goal: [held]
steps: []
"""


def test_an_observation_without_a_command_runs_its_parsers_own():
    from runbook_runner.observe.commands import OWN_COMMANDS
    from runbook_runner.runbook import loads

    text = OWN.replace("  holders: {parser: device-holders}\n", "")
    gpus = loads(text.encode(), "x.yaml", stem="x").observations["gpus"]
    assert gpus.command is not None
    assert gpus.own_command
    assert gpus.command.source == OWN_COMMANDS["gpus-detail"].text
    assert gpus.description == OWN_COMMANDS["gpus-detail"].description
    given = text.replace("{parser: gpus-detail}", "{parser: gpus-detail, command: nvidia-smi -q}")
    mine = loads(given.encode(), "x.yaml", stem="x").observations["gpus"]
    assert (mine.command.source if mine.command else None, mine.own_command) == (
        "nvidia-smi -q",
        False,
    )


def test_an_observation_without_a_command_whose_parser_has_none_is_refused_at_its_line():
    from runbook_runner.runbook import RunbookInvalid, loads

    with pytest.raises(RunbookInvalid) as raised:
        loads(OWN.encode(), "x.yaml", stem="x")
    [line] = raised.value.lines
    assert line.startswith("x.yaml:6:12: observations.holders: expected either 'command'")
    assert "a parser that has a command of its own (process-owners, gpus-detail" in line
    assert line.endswith("got parser: 'device-holders'")  # what it holds, not "a mapping"


def test_an_observation_with_both_command_and_text_is_told_what_it_holds():
    from runbook_runner.runbook import RunbookInvalid, loads

    both = OWN.replace("{parser: device-holders}", "{parser: free, command: free -b, text: x}")
    with pytest.raises(RunbookInvalid) as raised:
        loads(both.encode(), "x.yaml", stem="x")
    [line] = raised.value.lines
    assert line.startswith("x.yaml:6:12: observations.holders: expected either 'command'")
    assert line.endswith("got parser: 'free', command: 'free -b', text: 'x'")


def test_the_recovery_runbooks_own_commands_are_the_ones_it_wrote_out_before():
    """holders, gpus, shm and gpu_fabric gave these commands in full until the parsers owned
    them: the line sent is the same, so no matrix row moves (runbook compare says so too)."""
    runbook = load(REPO / "runbooks" / "gpu-oom-recovery.yaml")
    own = {n: o.parser for n, o in runbook.observations.items() if o.own_command}
    assert own == {
        "holders": "process-owners",
        "gpus": "gpus-detail",
        "shm": "shm-segments",
        "gpu_fabric": "gpu-fabric",
    }
    holders = runbook.observations["holders"].command
    assert holders is not None
    assert holders.source.startswith("ps -ww -N --ppid 2 -o pid,")
    assert "echo '@@ fuser'; fuser -v /dev/nvidia* 2>&1; echo '@@ proc';" in holders.source
    # since: nvidia-smi's own MPS clients and the host's MemTotal before the end mark
    assert "done; fi; timeout 5 nvidia-smi -q -d PIDS" in holders.source
    assert holders.source.endswith(
        "echo '@@ memory'; cat /proc/meminfo 2>/dev/null | grep '^MemTotal:'; echo '@@ end'"
    )


@pytest.mark.parametrize("parser", ["process-owners", "gpus-detail", "gpu-fabric", "shm-segments"])
@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_each_parsers_own_command_is_one_line_a_real_shell_reads(parser, shell):
    import subprocess

    from runbook_runner.observe.commands import OWN_COMMANDS

    text = OWN_COMMANDS[parser].text
    assert "\n" not in text
    done = subprocess.run([shell, "-n", "-c", text], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_digest_covers_the_parsers_own_commands_a_runbook_runs():
    import hashlib

    from runbook_runner.runbook import runbook_digest

    health = REPO / "runbooks" / "gpu-node-health.yaml"
    mine = tuple(o.source for o in _health().observations.values() if o.own_command)
    assert mine  # gpu_fabric runs its parser's own command
    assert _health().sha256 == runbook_digest(health.read_bytes(), mine)
    recovery = REPO / "runbooks" / "gpu-oom-recovery.yaml"
    raw = recovery.read_bytes()
    runbook = load(recovery)
    own = tuple(o.source for o in runbook.observations.values() if o.own_command)
    assert runbook.sha256 == runbook_digest(raw, own)
    assert runbook.sha256 != hashlib.sha256(raw).hexdigest()
    changed = (own[0] + " ", *own[1:])  # the tool's own command changed, the file did not
    assert runbook_digest(raw, changed) != runbook.sha256
