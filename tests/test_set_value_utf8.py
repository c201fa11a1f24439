"""A ``--set`` value that is not UTF-8 is refused in one line (exit 2): it reached the host
as U+FFFD, without a word."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO
from runbook_runner.exitcodes import ExitCode


def test_a_set_value_with_invalid_utf8_is_refused(tmp_path):
    value = b"server_pattern=sg\xff\xfelang"
    argv = [b"test", b"gpu-oom-recovery", b"--scenario", b"oom-crash", b"--set", value]
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"runbook_runner", *argv],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8"},
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    assert (
        done.stderr
        == b"runbook: --set server_pattern: the value is not valid UTF-8; give it in UTF-8\n"
    )
