"""A host name DNS cannot carry (an empty label, one over 63 characters) is bad input in one
line (exit 2): it was an internal error (exit 70) from Python's resolver."""

from __future__ import annotations

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode


@pytest.mark.parametrize("host", ["a..b", ".gpu01", "a" * 64 + ".example", "gpu01.." + "b" * 70])
def test_a_host_name_with_an_empty_or_64_character_label_is_bad_input(host, capsys):
    code = main(["check", "gpu-node-health", "--host", host, "--connect-timeout", "2"])
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT, err
    assert err.count("\n") == 1
    assert "not a host name (a label between dots is empty or longer than 63" in err
    assert "internal error" not in out + err
