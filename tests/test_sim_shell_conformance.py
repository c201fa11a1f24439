"""The simulated host is a real shell: a command answers the same over SSH as in a plain sh
here with the same stand-ins, byte for byte (stdout, stderr, exit status). The corpus is
ordinary shell (pipes, $(...), ||/&&, redirections, here-documents, xargs, awk, timeout,
background jobs with wait, trap) and every command of every shipped runbook."""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from conftest import REPO
from runbook_runner.runbook import load
from runbook_runner.simhost import hostshell
from runbook_runner.simhost.hosts import START
from runbook_runner.simhost.scenarios import SCENARIOS
from runbook_runner.simhost.sshserver import DrillHost
from runbook_runner.simhost.utilities import SERVED

IDIOMS = [
    "echo a; echo b",
    "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits"
    " | awk -F', ' '$2 > 1000 {print \"busy\", $1}'",
    'n=$(nvidia-smi -L | wc -l); echo "gpus=$n"; echo "nested $(echo "$(echo deep)")"',
    "false || echo a && echo b; true && false || echo c; ! false && echo negated",
    "echo out; echo err >&2; ls /rbr-no-such-path 2>&1 | head -n 1; echo gone >/dev/null",
    'echo x > "$TMPDIR/f"; cat < "$TMPDIR/f"; echo y >> "$TMPDIR/f"; wc -l < "$TMPDIR/f"',
    "exec 3>&1; echo via-3 >&3; { echo grouped; echo grouped-err >&2; } 2>&1",
    "cat <<EOF\nline $((1 + 1)) of $(nvidia-smi -L | wc -l)\nEOF\ncat <<'EOF'\nkept $HOME\nEOF",
    "nvidia-smi --query-gpu=index --format=csv,noheader | xargs -n 4 echo",
    "printf '%s\\n' 0 2 | xargs -I{} nvidia-smi -i {} --query-gpu=index,memory.used"
    " --format=csv,noheader",
    "free -b | awk '/^Mem:/ {printf \"%.1f GiB\\n\", $7 / 2^30}'",
    "timeout 5 nvidia-smi -L | head -n 2; timeout 0.3 tail -f /dev/null; echo timeout=$?",
    "for i in 1 3 5; do (nvidia-smi -i $i --query-gpu=index --format=csv,noheader"
    ' > "$TMPDIR/job$i") & done; wait; cat "$TMPDIR/job1" "$TMPDIR/job3" "$TMPDIR/job5"',
    'sleep 30 & p=$!; wait "$p"; echo "waited $?"; date +%s',
    "trap 'echo trapped $?' EXIT; echo body; false",
    "sh -c 'trap \"echo on-exit\" EXIT; exit 4'; echo inner=$?",
    'd=$(mktemp -d); echo hi > "$d/x"; cat "$d/x"; rm -rf "$d"; [ -e "$d" ] || echo removed',
    "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits"
    ' | while IFS=", " read -r i m; do [ "$m" -gt 1000 ] && echo "gpu $i holds $m"; done; true',
    'case "$(id -u)" in 0) echo root;; *) echo user;; esac; sudo -n sh -c "echo as-root"',
    "ls /dev/shm | sort; stat -c '%s %U %n' /dev/shm/* 2>&1",
    "cat /proc/meminfo | head -n 3; free -m | tail -n 2",
    "kill -0 1 2>&1; kill -TERM 999999 2>&1; echo kill=$?",
    "rbr-no-such-tool 2>/dev/null; echo missing=$?",
    "cat; echo stdin-was-empty",
    # nvidia-smi as the runbooks and the docs call it: -i for every query (an index, a PCI
    # bus id, a UUID, a list), --query-compute-apps per GPU, -q sections, MIG listings
    "nvidia-smi -i 2 --query-compute-apps=pid,process_name,used_gpu_memory,gpu_bus_id"
    " --format=csv; nvidia-smi -i 0,3 --query-gpu=index,pci.bus_id --format=csv,noheader",
    "nvidia-smi -q -d MEMORY -i 0; nvidia-smi -q -d PIDS -i 00000000:28:00.0",
    "nvidia-smi -q -d ROW_REMAPPER,ECC -i 4; nvidia-smi -q -i GPU-5a1e0000-0000-4000-8000-000000000001"
    " | grep -E 'Minor|MIG|Used'",
    "nvidia-smi mig -lgi; echo lgi=$?; nvidia-smi mig -lci -i 1; echo lci=$?;"
    " nvidia-smi -i 99 -L; echo none=$?; nvidia-smi -L -i 7",
    "exit 7",
]


# One item of each kind a step acts on, as the engine passes them (from the state).
ITEM = {
    "index": 2,
    "mps_server": 7801,
    "path": "/dev/shm/sglang_hicache_0",
    "pid": 4123,
    "text": "nvidia-persistenced",
    "unit": "sglang.service",
}


def runbook_commands() -> list[tuple[str, str]]:
    """Every command of every shipped runbook, rendered with its parameters' defaults
    (and, for a step over items, one item)."""
    found = []
    for path in sorted((REPO / "runbook_runner" / "runbooks").glob("*.yaml")):
        runbook = load(path)

        def lookup(name: str, runbook=runbook) -> object:
            if name.startswith("item."):
                return ITEM[name.removeprefix("item.")]
            return runbook.parameters[name].default

        templates = [(f"observation {k}", o.command) for k, o in runbook.observations.items()]
        templates += [(f"step {s.id}", s.run) for s in runbook.steps]
        for label, template in templates:
            if template is not None:
                found.append((f"{runbook.name}: {label}", template.render(lookup)))
    return found


RUNBOOK_COMMANDS = runbook_commands()


class Client:
    """A paramiko client of the simulated host, connected again after a reboot dropped it."""

    def __init__(self, simulated: DrillHost) -> None:
        self.simulated = simulated
        self._client: paramiko.SSHClient | None = None
        self.boots = 0  # the host's reboots when connected: a reboot drops the connection

    def get(self) -> paramiko.SSHClient:
        transport = self._client.get_transport() if self._client else None
        if transport is not None and transport.is_active() and self.boots == self.simulated.reboots:
            return self._client  # type: ignore[return-value]
        self.close()
        client = paramiko.SSHClient()
        key = self.simulated.host_key
        client.get_host_keys().add(f"[127.0.0.1]:{self.simulated.port}", key.get_name(), key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            "127.0.0.1",
            port=self.simulated.port,
            username="root",
            pkey=self.simulated.client_key,
            allow_agent=False,
            look_for_keys=False,
        )
        self._client, self.boots = client, self.simulated.reboots
        return client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@pytest.fixture(scope="module")
def host():
    scenario = SCENARIOS["leaked-shm"]
    simulated = DrillHost(scenario.build()).start()
    client = Client(simulated)
    yield simulated, client, scenario
    client.close()
    simulated.stop()


def over_ssh(client: Client, command: str) -> tuple[bytes, bytes, int]:
    stdin, stdout, stderr = client.get().exec_command(command, timeout=60)
    stdin.channel.shutdown_write()  # as the plain run below: stdin at its end
    out, err = stdout.read(), stderr.read()
    return out, err, stdout.channel.recv_exit_status()


def both_ways(host, command: str) -> tuple[tuple[bytes, bytes, int], tuple[bytes, bytes, int]]:
    simulated, client, scenario = host
    start = scenario.build()
    simulated.restore(copy.deepcopy(start), START)
    reboots = simulated.reboots
    remote = over_ssh(client, command)
    remote_state = simulated.host.to_json()
    simulated.restore(copy.deepcopy(start), START)
    done = simulated.run_local(command)
    local = (done.stdout, done.stderr, done.returncode)
    if simulated.reboots != reboots:
        # The session ends before a reboot's status can come back (sshserver.respond), as
        # on a host whose shutdown ends it first: over SSH there is no status to compare.
        assert remote[2] == -1, remote
        remote = (remote[0], remote[1], local[2])
    assert remote == local
    assert simulated.host.to_json() == remote_state  # the same change to the host, too
    return remote, local


def test_both_ways_see_the_hosts_clock_not_this_machines(host):
    """What both_ways compares is what the simulation controls: the time nvidia-smi prints
    is the host's simulated time (restored for each side), however long a side took here."""
    simulated, _, scenario = host
    stamps = []
    for now in (START, START, START + 3 * 3600):
        simulated.restore(scenario.build(), now)
        first = simulated.run_local("nvidia-smi | head -n 1; date +%s").stdout.decode()
        stamp, seconds = first.splitlines()
        stamps.append(stamp.strip())
        assert time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(int(seconds))) == stamps[-1]
    assert stamps[0] == stamps[1] != stamps[2]


@pytest.mark.parametrize("command", IDIOMS, ids=range(len(IDIOMS)))
def test_a_shell_idiom_answers_the_same_over_ssh_and_in_a_plain_sh(host, command):
    remote, local = both_ways(host, command)
    assert remote == local


@pytest.mark.parametrize(
    "command", [c for _, c in RUNBOOK_COMMANDS], ids=[label for label, _ in RUNBOOK_COMMANDS]
)
def test_every_runbook_command_answers_the_same_over_ssh_and_in_a_plain_sh(host, command):
    remote, local = both_ways(host, command)
    assert remote == local
    assert b"not simulated" not in remote[1]


def test_the_corpus_is_real_shell_and_covers_every_runbook():
    assert {p.stem for p in (REPO / "runbook_runner" / "runbooks").glob("*.yaml")} == {
        label.split(":")[0] for label, _ in RUNBOOK_COMMANDS
    }
    assert len(RUNBOOK_COMMANDS) > 40
    # every stand-in on the host's PATH has its simulated command
    assert set(hostshell.SERVED) | set(hostshell.PATHS_ONLY) <= set(SERVED)


def test_the_idioms_give_what_sh_gives(host):
    """Not only the same both ways: what a shell gives (the host's bash is a real one)."""
    simulated, _, scenario = host
    simulated.restore(scenario.build(), START)
    assert simulated.run_local(IDIOMS[3]).stdout == b"a\nb\nc\nnegated\n"
    assert simulated.run_local(IDIOMS[7]).stdout == b"line 2 of 8\nkept $HOME\n"
    assert simulated.run_local(IDIOMS[11]).stdout.endswith(b"timeout=124\n")
    assert simulated.run_local(IDIOMS[14]).stdout == b"body\ntrapped 1\n"
    assert simulated.run_local(IDIOMS[-1]).returncode == 7
    waited = simulated.run_local(IDIOMS[13]).stdout.decode().split()
    assert waited[:2] == ["waited", "0"]


def test_nothing_outside_the_simulation_is_signalled_or_removed(host, tmp_path: Path):
    """kill reaches only simulated processes; rm of /dev/shm only simulated segments."""
    simulated, _, scenario = host
    simulated.restore(scenario.build(), START)
    bystander = subprocess.Popen(["sleep", "60"])  # a process of this machine
    try:
        done = simulated.run_local(f"kill -KILL {bystander.pid}; echo $?")
        assert done.stdout == b"1\n"
        assert b"No such process" in done.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    # /dev/shm is the host's own: the machine's stays as it was
    mine = Path("/dev/shm") / f"rbr-conformance-{os.getpid()}"
    mine.write_text("mine")
    try:
        done = simulated.run_local(f"rm -f -- {shlex.quote(str(mine))}; ls /dev/shm")
        assert mine.read_text() == "mine"
        assert mine.name.encode() not in done.stdout
    finally:
        mine.unlink()


def test_the_python_stand_in_client_answers_as_the_c_one(host):
    """Without a C compiler the stand-ins are the Python client: the same bytes."""
    import sys

    simulated, _, scenario = host
    simulated.restore(scenario.build(), START)
    env = simulated.shell.env()
    answers = []
    for client in (
        shlex.split(hostshell.client_command()),
        [sys.executable, "-S", "-I", "-B", str(hostshell.CLIENT)],
    ):
        done = subprocess.run(
            [*client, "free", "-b"], env=env, capture_output=True, timeout=30, check=False
        )
        answers.append((done.stdout, done.stderr, done.returncode))
        failed = subprocess.run(
            [*client, "kill", "-9", "1"], env=env, capture_output=True, timeout=30, check=False
        )
        answers.append((failed.stdout, failed.stderr, failed.returncode))
    assert answers[0] == answers[2]
    assert answers[1] == answers[3] == (b"", b"kill: (1) - No such process\n", 1)
    assert answers[0][0].startswith(b"               total")
