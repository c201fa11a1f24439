"""The front door's commands work as written: every command of README.md and
docs/manual/command.md that targets a host runs, in the order the page gives, against
``runbook sim`` started with that page's own sim line, with HOST (and the example address)
replaced by the options the sim prints. A non-zero exit fails the test unless the line's
comment announces it (``exit N``). Each command runs in bash under a pseudo-terminal, as a
person types it, answering yes to each confirmation it asks."""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from test_practice_host import Sim

from conftest import REPO

PAGES = ("README.md", "docs/manual/command.md")
EXAMPLE_HOST = re.compile(r"--host (?:HOST|(?:root@)?10\.1\.230\.174)(?=\s|$)")
# The launch line of step 5: the practice host has no SGLang, so ``echo`` stands in for
# starting it; the preflight reads the line as it would the real one.
LAUNCH = (
    "echo python3 -m sglang.launch_server --model-path m --tp-size 8 "
    "--enable-hierarchical-cache --hicache-size 40"
)


def host_commands(markdown: str) -> list[tuple[str, set[int]]]:
    """Each line of a ```sh block that reaches a host (``--host``, ``ssh HOST``), in page
    order, with the exit codes its comment announces."""
    found = []
    for body in re.findall(r"```sh\n(.*?)^ *```", markdown, re.M | re.S):
        for line in body.splitlines():
            command, _, comment = line.strip().partition("  #")
            if not command.startswith("runbook ") or not (
                EXAMPLE_HOST.search(command) or command.startswith("runbook sim")
            ):
                continue
            announced = {int(n) for n in re.findall(r"\bexits? (\d+)", comment)}
            found.append((command.strip(), announced))
    return found


def in_a_terminal(command: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """``bash -c COMMAND`` on a pseudo-terminal; each ``[y/N]`` question answered ``y``."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        ["bash", "-c", command], stdin=follower, stdout=follower, stderr=follower,
        cwd=cwd, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    seen, answered = b"", 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            seen += chunk
            if seen.count(b"[y/N]") > answered:
                answered += 1
                os.write(leader, b"y\n")
        elif process.poll() is not None:
            break
    else:
        process.kill()
    os.close(leader)
    code = process.wait(timeout=30)
    return code, seen.decode(errors="replace")


@pytest.mark.parametrize("page", PAGES)
def test_every_host_command_of_the_page_runs_as_written_on_the_practice_host(
    page, tmp_path, run_journals_in_tmp
):
    commands = host_commands((REPO / page).read_text())
    sims = [c for c, _ in commands if c.startswith("runbook sim")]
    assert sims, f"{page}: a sim line starts the practice host"  # the first one does
    assert len(commands) >= 5
    sim = Sim(tmp_path / "sim", *shlex.split(sims[0])[2:])
    options = " ".join(shlex.quote(o) for o in sim.options())
    config = shlex.quote(str(tmp_path / "sim" / "ssh_config"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAUNCH": LAUNCH, "USER": "oncall"}
    env.setdefault("RUNBOOK_PATH", str(REPO / "runbooks"))
    bin_dir = tmp_path / "bin"  # `runbook` is this checkout's, whatever is installed
    bin_dir.mkdir()
    (bin_dir / "runbook").write_text('#!/bin/sh\nexec python3 -m runbook_runner "$@"\n')
    (bin_dir / "runbook").chmod(0o755)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    work = tmp_path / "work"
    work.mkdir()
    plan_hash = None
    try:
        for command, announced in commands:
            if command.startswith("runbook sim"):
                continue
            typed = EXAMPLE_HOST.sub(lambda _: options, command)
            typed = typed.replace("ssh HOST", f"ssh -F {config} sim0001")
            if "HASH" in typed:
                assert plan_hash, f"{page}: {command!r} needs the hash a plan printed before it"
                typed = typed.replace("HASH", plan_hash)
            code, printed = in_a_terminal(typed, work, env, timeout=240)
            found = re.search(r"plan sha256: ([0-9a-f]{64})", printed)
            plan_hash = found.group(1) if found else plan_hash
            assert "Traceback" not in printed, (command, printed[-3000:])
            assert code == 0 or code in announced, (
                f"{page}: {command!r} exited {code}, which its comment does not announce:\n"
                + printed[-3000:]
            )
    finally:
        sim.stop()
