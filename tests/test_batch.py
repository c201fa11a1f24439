"""One round trip per observation set: the batch script, its framing, and the runner using it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from runbook_runner.engine import OBSERVE_IN_C_LOCALE, Runner
from runbook_runner.runbook import load
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
    assert batch.deadline(commands) == pytest.approx(7 + 3 + 0.5 + 3 + 2 + 5)


# -- over the real sshd --------------------------------------------------------------------------

# Timeouts far beyond what each needs (a loaded machine is slow), but the one ended by its
# timeout: it prints at once, then sleeps far longer than the 3 s it is given.
ODD_COMMANDS = [
    BatchCommand("echo out; echo err >&2", 60),
    BatchCommand(r"printf '\000\377\376\nbin\r\n'", 60),  # binary output, not UTF-8
    BatchCommand("echo failing >&2; exit 3", 60),
    BatchCommand("no-such-command-rbr --flag", 60),  # the shell's own error, exit 127
    BatchCommand("echo before; sleep 600; echo after", 3),  # ended by its timeout
    BatchCommand("echo 'rbr-0123 1 0 0 0'; printf 'no newline'", 60),
    BatchCommand("nvidia-smi --query-gpu=index,name,memory.used --format=csv", 60),
    BatchCommand("id -un", 60, as_root=True),  # through sudo -n: refused for the test user
    BatchCommand("head -c 300000 /dev/zero | tr '\\0' y; head -c 5000 /dev/zero >&2", 60),
    BatchCommand("echo alone", 60, alone=True),
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


def ended(pid: int) -> bool:
    """The process is gone (or a zombie waiting for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_timed_out_command_whose_child_ignores_term_is_killed_with_its_group(connect):
    """timeout's TERM ends the command's shell; a child that ignores TERM is KILLed after
    the grace, before the answer comes back (the sshd runs on this machine: its PIDs are ours)."""
    transport = connect()
    stubborn = "(trap '' TERM; exec sleep 120) & echo $!; wait"
    together, alone = transport.run_many(
        [BatchCommand(stubborn, 1), BatchCommand(stubborn, 1, alone=True)]
    )
    for result in (together, alone):
        assert result.timed_out
        assert ended(int(result.stdout.split()[0])), result


def test_commands_of_a_set_run_at_the_same_time_unless_alone(connect, tmp_path):
    """Two commands that each wait for the other's mark: both succeed only when run together.
    Together, each waits up to 60 s for the other (it comes at once, however slow the
    machine); alone, the first gives up after 5 s: the second cannot start before it ends."""
    transport = connect()
    folder = f"/tmp/rbr-batch-{tmp_path.name}"

    def meet(me: str, other: str, *, alone: bool = False) -> BatchCommand:
        tries = 100 if alone else 1200  # of 0.05 s
        command = (
            f"mkdir -p {folder}; touch {folder}/{me}; i=0; "
            f"while [ ! -e {folder}/{other} ] && [ $i -lt {tries} ]; do sleep 0.05; i=$((i+1)); done; "
            f"[ -e {folder}/{other} ]"
        )
        return BatchCommand(command, 120, alone=alone)

    try:
        together = transport.run_many([meet("a", "b"), meet("b", "a")])
        assert [r.exit_status for r in together] == [0, 0]
        transport.run(f"rm -rf {folder}", 60)
        apart = transport.run_many([meet("a", "b", alone=True), meet("b", "a", alone=True)])
        assert [r.exit_status for r in apart] == [1, 0]
    finally:
        transport.run(f"rm -rf {folder}", 60)


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


# -- a host that is not a real shell: the script unpacked, its answer framed --------------------


def test_unpack_gives_back_each_command_as_sent_even_over_several_lines():
    commands = [
        *ODD_COMMANDS,
        BatchCommand("printf 'two\\nlines'; echo \"$HOME\" 'it'\"'\"'s'", 5, as_root=True),
        BatchCommand("cat <<'EOF'\nheredoc line\nEOF", 5),
    ]
    boundary = batch.new_boundary()
    unpacked = batch.unpack(batch.script(commands, boundary, 4096, is_root=False))
    assert unpacked is not None
    assert unpacked.boundary == boundary
    assert unpacked.limit == 4096
    assert unpacked.commands == tuple(batch.as_sent(c, False) for c in commands)
    assert batch.unpack("echo hi") is None
    assert batch.unpack("printf '%s%s\\n' rbr-pgid: $$ >&2\necho 'unterminated") is None


def test_a_framed_answer_reads_back_as_what_each_command_gave():
    commands = [BatchCommand("a", 5), BatchCommand("b", 5), BatchCommand("c", 5, alone=True)]
    boundary = batch.new_boundary()
    unpacked = batch.unpack(batch.script(commands, boundary, 8, is_root=True))
    assert unpacked is not None
    given = {
        "a": (0, b"x" * 20, b""),  # longer than the limit: the last 8 bytes are kept
        "b": (3, f"{boundary} 0 0\n".encode(), b"err\n"),  # output that mimics the framing
        "c": (127, b"", b"\xff\xfe"),
    }
    outputs = batch.parse(batch.frame(unpacked, given.__getitem__), 3, boundary, 8)
    assert [(o.exit_status, o.stdout_size, o.stderr_size) for o in outputs] == [
        (0, 20, 0),
        (3, len(given["b"][1]), 4),
        (127, 0, 2),
    ]
    assert outputs[0].stdout == b"x" * 8
    assert outputs[1].stdout == given["b"][1][-8:]
    assert outputs[2].stderr == b"\xff\xfe"


def test_the_simulated_host_answers_a_goal_check_on_one_channel():
    """The drill's host (an in-process SSH server running each command in a real shell)
    runs the batch script as sent: one channel per set."""
    from pathlib import Path

    from runbook_runner.simhost import drill
    from runbook_runner.transport import SshTransport, resolve_target

    started = drill.start("oom-crash")
    try:
        executed: list[str] = []
        real = started.host.respond
        started.host.respond = lambda channel, transport, command: (  # type: ignore[method-assign]
            executed.append(command) or real(channel, transport, command)
        )
        runbook = load(REPO / "runbook_runner" / "runbooks" / "gpu-oom-recovery.yaml")
        params = {name: p.default for name, p in runbook.parameters.items()}
        target = resolve_target(
            "127.0.0.1",
            port=started.host.port,
            user="root",
            identity_files=[str(started.identity)],
            known_hosts=Path(started.known_hosts),
            ssh_config=Path(started.ssh_config),
        )
        with SshTransport(target).connect() as transport:
            executed.clear()  # the login's probe
            together = Runner(runbook, params, transport).check_goal("now")
            assert len(executed) == 1
            assert batch.unpack(executed[0]) is not None

            class OneByOne(Counting):
                run_many = None  # type: ignore[assignment]

            apart = Runner(runbook, params, OneByOne(transport)).check_goal("now")
        assert len(executed) == 1 + len(runbook.observations)
        # ps shows the simulated shell's own pid, which differs: the rest must be equal.
        assert {k: v for k, v in together.state.items() if k != "processes"} == {
            k: v for k, v in apart.state.items() if k != "processes"
        }
        assert [r.to_json() for r in together.results] == [r.to_json() for r in apart.results]
        assert "failing" in [r.status for r in together.results]  # oom-crash: GPUs still held
    finally:
        started.close()


def test_a_host_that_refuses_the_script_is_not_asked_again_on_that_connection(connect):
    transport = connect()
    sent: list[str] = []
    real = transport._open_channel

    def opening(*args: str) -> Any:
        channel = real(*args)
        original = channel.exec_command
        channel.exec_command = lambda command: sent.append(command) or original(command)
        return channel

    transport._open_channel = opening  # type: ignore[method-assign]
    # A PATH without timeout(1): the script exits 97 and the commands run one by one.
    commands = [BatchCommand(f"PATH=/nonexistent; echo {i}", 60) for i in range(2)]
    transport.run(": warm", 60)
    sent.clear()
    real_script = batch.script
    try:
        batch.script = lambda *a, **k: "exit 97\n"  # type: ignore[assignment]
        first = transport.run_many(commands)
        second = transport.run_many(commands)
    finally:
        batch.script = real_script  # type: ignore[assignment]
    assert [r.stdout for r in first] == [r.stdout for r in second] == ["0\n", "1\n"]
    assert len(sent) == 1 + 2 + 2  # one refused script, then only one channel per command
