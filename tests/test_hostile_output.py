"""The host's text is data: escape sequences it prints never reach the operator's terminal
raw, and a Markdown timeline never carries its markup or HTML.

A stand-in host (real sshd) with a hostile GPU name, process name, kernel log and stderr:
each output channel (check, run, runs show, runs show --markdown) is read back and must hold
no raw ESC, CR, BEL or C1 control, only their visible escapes.
"""

from __future__ import annotations

import re
import shlex

import pytest

from runbook_runner.cli import main
from runbook_runner.exitcodes import ExitCode
from runbook_runner.safetext import markdown_cell, visible, visible_styled
from runbook_runner.simhost.model import eight_gpu_server

pytestmark = pytest.mark.ssh

# window title, OSC 52 clipboard write, clear screen + home, a CR that overwrites, a C1 CSI,
# a bidi override, HTML and Markdown
EVIL = (
    "\x1b]0;pwned\x07\x1b]52;c;cm0gLXJmIC8=\x07\x1b[2J\x1b[H\rOVERWRITTEN\x9b31m"
    "\u202e<script>alert(1)</script>|`x`![i](http://e/i.png)"
    "\x1b[1;32mGREEN\x1b[0m\x1b[32m"  # the colour codes the tool uses for itself
)
RAW = ["\x1b", "\r", "\x07", "\x9b", "\u202e"]

RUNBOOK = """\
name: hostile
title: Hostile host output
summary: Everything the host prints here is hostile.
observations:
  gpus: {command: "nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,memory.total --format=csv", parser: gpus}
  gpu_processes: {command: "nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_bus_id --format=csv", parser: gpu-processes}
  kmsg: {command: dmesg, parser: lines}
checks:
  quiet-kernel: {description: no kernel messages, none: kmsg}
  no-processes: {description: no compute process, none: gpu_processes}
goal: [quiet-kernel, no-processes]
steps:
  - id: shout
    title: Print what the host says, to stderr too
    run: "dmesg >&2; nvidia-smi -L; exit 1"
    on_failure: continue
"""


@pytest.fixture
def hostile_host(gpu_host, tmp_path):
    state = eight_gpu_server()
    state.gpus[0].name = "NVIDIA " + EVIL.replace(",", ";")
    state.kernel_messages = ["NVRM: Xid 79 " + EVIL]
    gpu_host.set_state(state)
    name = "srv" + EVIL.replace(" ", "")
    result = gpu_host.ssh(f"sim-server --name {shlex.quote(name)} --gpu 0:5000")
    assert result.returncode == 0, result.stderr
    runbook = tmp_path / "hostile.yaml"
    runbook.write_text(RUNBOOK)
    return gpu_host, str(runbook)


def _assert_visible_only(text: str) -> None:
    for char in RAW:
        assert char not in text, f"raw {char!r} reached the output"


def test_check_shows_host_control_characters_escaped(hostile_host, capsys):
    host, runbook = hostile_host
    code = main(["check", runbook, *host.cli_args()])
    out, err = capsys.readouterr()
    assert code == ExitCode.GOAL_NOT_MET
    _assert_visible_only(out + err)
    assert "\\x1b]0;pwned\\x07" in out  # the data is there, made visible
    assert "\\x1b[1;32mGREEN\\x1b[0m" in out  # host colour codes shown, not obeyed


def test_run_and_runs_show_escape_host_output(hostile_host, capsys):
    host, runbook = hostile_host
    main(["run", runbook, *host.cli_args(), "--yes"])
    out, err = capsys.readouterr()
    _assert_visible_only(out + err)
    assert "\\x1b]52;c;" in out  # the step's output tail, made visible
    assert "\\rOVERWRITTEN" in out

    assert main(["runs"]) == ExitCode.OK
    run_id = capsys.readouterr()[0].splitlines()[1].split()[0]
    assert main(["runs", "show", run_id]) == ExitCode.OK
    out, err = capsys.readouterr()
    _assert_visible_only(out + err)
    assert "\\x1b]0;pwned" in out

    assert main(["runs", "show", run_id, "--markdown"]) == ExitCode.OK
    out, err = capsys.readouterr()
    _assert_visible_only(out + err)
    assert "<script>" not in out
    assert "&lt;script&gt;" in out
    assert "![i]" not in out
    for row in out.splitlines():
        cells = re.split(r"(?<!\\)\|", row)
        assert len(cells) == 5, row  # '' + three cells + '': no cell broke out


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("line\roverwrite", "line\\roverwrite"),
        ("bell\x07", "bell\\x07"),
        ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
        ("rtl\u202eevil", "rtl\\u202eevil"),
        ("two\nlines\tand tab", "two\nlines\tand tab"),
    ],
)
def test_visible_shows_each_control_character(text, shown):
    assert visible(text) == shown


def test_visible_styled_keeps_only_our_colours():
    from runbook_runner.cli.render import Style

    ours = Style(True)("FAIL", "bold", "red")
    assert visible_styled(ours + " \x1b]0;t\x07") == "\x1b[1;31mFAIL\x1b[0m \\x1b]0;t\\x07"
    assert visible_styled("\x1b[2J") == "\\x1b[2J"


def test_host_text_with_our_own_colour_codes_never_styles():
    """The same SGR codes the tool uses, written by a host, are shown escaped: in a line,
    inside our own colour, and in a line that holds our colour too."""
    from runbook_runner.cli.render import Style

    host = "\x1b[1;32mgreen\x1b[0m"
    assert visible_styled(host) == "\\x1b[1;32mgreen\\x1b[0m"
    line = Style(True)("FAIL", "red") + " " + host
    assert visible_styled(line) == "\x1b[31mFAIL\x1b[0m \\x1b[1;32mgreen\\x1b[0m"
    assert visible_styled(Style(True)(host, "red")).count("\x1b[") == 2  # ours only
    assert Style(False)(host) == "\\x1b[1;32mgreen\\x1b[0m"


def test_markdown_cell_escapes_markup_html_and_newlines():
    cell = markdown_cell("<b>x</b> | `code` *em* [l](u)\nnext\x1b")
    assert cell == ("&lt;b&gt;x&lt;/b&gt; \\| \\`code\\` \\*em\\* \\[l\\](u)\\\\nnext\\\\x1b")
