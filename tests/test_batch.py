"""One round trip per observation set: the batch script, its framing, and the runner using it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from runbook_runner.runbook import load
from runbook_runner.runner import OBSERVE_IN_C_LOCALE, Runner
from runbook_runner.ssh import batch
from runbook_runner.ssh.batch import BatchCommand

REPO = Path(__file__).resolve().parent.parent
COMPARED = ("command", "exit_status", "stdout", "stderr", "timed_out", "stdout_size", "stderr_size")


# -- the framing, without a host ----------------------------------------------------------------


def framed(boundary: str, outputs: list[tuple[str, bytes, bytes]], limit: int) -> bytes:
    """What the script prints for these (exit status, stdout, stderr)."""
    data = b"".join(
        f"{boundary} {i} {status}\n".encode() for i, (status, _, _) in enumerate(outputs)
    )
    for i, (_, out, err) in enumerate(outputs):
        data += f"{len(out):7d} {i}.o\n{len(err):7d} {i}.e\n".encode()
    data += b"999 total\n" + boundary.encode() + b"\n"
    for _, out, err in outputs:
        data += out[-limit:] + err[-limit:]
    return data


def test_output_that_looks_like_a_header_is_data():
    boundary = batch.new_boundary()
    forged = f"{boundary} 1 0\n      0 1.o\n{boundary}\n".encode()  # framing, printed
    data = framed(boundary, [("0", forged * 3, forged), ("7", b"", b"")], 1000)
    first, second = batch.parse(data, 2, boundary, 1000)
    assert first.stdout == forged * 3
    assert first.stderr == forged
    assert first.exit_status == 0
    assert second.exit_status == 7
    assert second.stdout == b""


def test_a_missing_status_is_a_timeout_and_sizes_count_all_bytes():
    boundary = batch.new_boundary()
    data = framed(boundary, [("-", b"x" * 50, b"\xff\x00")], 10)
    (only,) = batch.parse(data, 1, boundary, 10)
    assert only.timed_out
    assert only.exit_status is None
    assert only.stdout == b"x" * 10
    assert only.stdout_size == 50
    assert only.stderr == b"\xff\x00"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"rbr-other 0 0\n",
        b"BOUNDARY 0 0\n 5 0.o\n 0 0.e\nBOUNDARY\nabc",  # cut short
        b"BOUNDARY 0 0\n 0 0.o\n 0 0.e\nBOUNDARY\ntrailing",
        b"BOUNDARY 1 0\n 0 0.o\n 0 0.e\nBOUNDARY\n",  # wrong index
        b"BOUNDARY 0 zero\n 0 0.o\n 0 0.e\nBOUNDARY\n",
        b"BOUNDARY 0 0\n 0 0.o\n 0 0.e\n",  # no end to the sizes
        b"BOUNDARY 0 0\n 0 0.o\nBOUNDARY\n",  # a size missing
    ],
)
def test_garbled_output_is_refused(data):
    with pytest.raises(batch.BatchGarbled):
        batch.parse(data, 1, "BOUNDARY", 100)


def test_each_command_has_its_own_timeout_and_alone_ones_run_after_the_others():
    commands = [
        BatchCommand("a", 3),
        BatchCommand("b", 0.5, alone=True),
        BatchCommand("c", 7, as_root=True),
    ]
    text = batch.script(commands, "B", 1000, is_root=False)
    lines = text.splitlines()
    together = [line for line in lines if line.endswith(" &")]
    assert len(together) == 2
    assert "timeout -k 2 3 " in together[0]
    assert "sudo -n sh -c c" in together[1]
    assert "timeout -k 2 7 " in together[1]
    wait = lines.index("wait")
    alone = [i for i, line in enumerate(lines) if "timeout -k 2 0.5 " in line]
    assert alone
    assert alone[0] > wait
    assert not lines[alone[0]].endswith("&")
    assert batch.deadline(commands) == pytest.approx(7 + 3 + 0.5 + 3 + 5)


# -- over the real sshd --------------------------------------------------------------------------

ODD_COMMANDS = [
    BatchCommand("echo out; echo err >&2", 5),
    BatchCommand(r"printf '\000\377\376\nbin\r\n'", 5),  # binary output, not UTF-8
    BatchCommand("echo failing >&2; exit 3", 5),
    BatchCommand("no-such-command-rbr --flag", 5),  # the shell's own error, exit 127
    BatchCommand("echo before; sleep 30; echo after", 0.5),  # ended by its timeout
    BatchCommand("echo 'rbr-0123 1 0 0 0'; printf 'no newline'", 5),
    BatchCommand("nvidia-smi --query-gpu=index,name,memory.used --format=csv", 10),
    BatchCommand("id -un", 5, as_root=True),  # through sudo -n: refused for the test user
    BatchCommand("head -c 300000 /dev/zero | tr '\\0' y; head -c 5000 /dev/zero >&2", 5),
    BatchCommand("echo alone", 5, alone=True),
]


def test_run_many_gives_byte_identical_results_to_one_channel_per_command(connect):
    transport = connect()
    limit = 100_000  # smaller than one output: the kept tail and the sizes must agree too
    many = transport.run_many(ODD_COMMANDS, output_limit=limit)
    alone = [
        transport.run(c.command, c.timeout, as_root=c.as_root, output_limit=limit)
        for c in ODD_COMMANDS
    ]
    for together, single in zip(many, alone, strict=True):
        assert {k: getattr(together, k) for k in COMPARED} == {
            k: getattr(single, k) for k in COMPARED
        }
    assert many[1].stdout == "\x00\ufffd\ufffd\nbin\r\n"
    assert many[2].exit_status == 3
    assert many[2].stderr == "failing\n"
    assert many[3].exit_status == 127
    assert "no-such-command-rbr" in many[3].stderr
    assert many[4].timed_out
    assert many[4].stdout == "before\n"
    assert many[8].stdout_size == 300_000
    assert len(many[8].stdout) == limit


def test_commands_of_a_set_run_at_the_same_time_unless_alone(connect, tmp_path):
    """Two commands that each wait for the other's mark: both succeed only when run together."""
    transport = connect()
    folder = f"/tmp/rbr-batch-{tmp_path.name}"

    def meet(me: str, other: str, *, alone: bool = False) -> BatchCommand:
        command = (
            f"mkdir -p {folder}; touch {folder}/{me}; i=0; "
            f"while [ ! -e {folder}/{other} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
            f"[ -e {folder}/{other} ]"
        )
        return BatchCommand(command, 20, alone=alone)

    try:
        together = transport.run_many([meet("a", "b"), meet("b", "a")])
        assert [r.exit_status for r in together] == [0, 0]
        transport.run(f"rm -rf {folder}", 5)
        apart = transport.run_many([meet("a", "b", alone=True), meet("b", "a", alone=True)])
        assert [r.exit_status for r in apart] == [1, 0]
    finally:
        transport.run(f"rm -rf {folder}", 5)


class Counting:
    """A transport that counts round trips and commands, passing everything to the real one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.is_root = inner.is_root
        self.channels = 0
        self.commands: list[str] = []

    def run(self, command: str, timeout: float, **kwargs: Any) -> Any:
        self.channels += 1
        self.commands.append(command)
        return self.inner.run(command, timeout, **kwargs)

    def run_many(self, commands: list[BatchCommand], **kwargs: Any) -> Any:
        self.channels += 1
        self.commands += [c.command for c in commands]
        return self.inner.run_many(commands, **kwargs)

    def alive(self) -> bool:
        return bool(self.inner.alive())

    def reconnect(self) -> object:
        return self.inner.reconnect()


def test_a_goal_check_is_one_round_trip_with_the_same_state_as_one_by_one(connect):
    runbook = load(REPO / "runbook_runner" / "runbooks" / "gpu-oom-recovery.yaml")
    counting = Counting(connect())
    params = {name: p.default for name, p in runbook.parameters.items()}
    together = Runner(runbook, params, counting).check_goal("now")
    assert counting.channels == 1
    assert len(counting.commands) == len(runbook.observations)  # the whole state is shown

    class OneByOne(Counting):
        run_many = None  # type: ignore[assignment]

    single = OneByOne(counting.inner)
    apart = Runner(runbook, params, single).check_goal("now")
    assert single.channels == len(counting.commands)
    # ps shows this machine's real processes (and our own commands): the rest must be equal.
    assert {k: v for k, v in together.state.items() if k != "processes"} == {
        k: v for k, v in apart.state.items() if k != "processes"
    }
    assert [r.to_json() for r in together.results] == [r.to_json() for r in apart.results]


def test_a_wait_polls_only_the_observations_its_condition_reads(connect):
    runbook = load(REPO / "tests" / "runbooks" / "mini-recovery.yaml")
    step = dataclasses.replace(runbook.step("stop-server"), run=None, skip_if=())
    counting = Counting(connect())
    runner = Runner(runbook, {n: p.default for n, p in runbook.parameters.items()}, counting)
    end = runner._wait(step)  # until: [no-compute-processes]
    assert end.reached
    assert counting.commands == [
        OBSERVE_IN_C_LOCALE + runbook.observations["gpu_processes"].command.source
    ]
