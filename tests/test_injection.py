"""Values never run: in the list form each value is one word, proven through a real shell.

Both forms, as the loader takes them: a command string holds no placeholder (refused at
load time, with the list form to write), and a list of words is rendered with each word
quoted once. Arbitrary bytes (quotes, $(...), backticks, newlines, a leading '-', bytes
that are not UTF-8) are fed through a real ``sh`` and ``bash``, alone, under the C-locale
prefix observations get, under ``sh -c`` as ``sudo -n sh -c`` wraps a root command, and in
the batch script (ssh/batch.py) that runs a set of observations: each value arrives as one
argument, byte-exact, and a canary command never runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runbook_runner.engine.observing import OBSERVE_IN_C_LOCALE
from runbook_runner.format.template import PLACEHOLDER, Template, ValueRefused, quote
from runbook_runner.runbook import RunbookInvalid, loads
from runbook_runner.ssh import batch

PAYLOADS = [
    "$(touch canary)",
    "`touch canary`",
    "'; touch canary; '",
    '"; touch canary; "',
    "x\ntouch canary\n",
    "a'$(touch canary)'b",
    "\\'; touch canary #",
    "${IFS}touch${IFS}canary",
    "$'\\x27'; touch canary",
    "x; touch canary",
    "-rf",
    "--help",
    "-",
    "",
    " ",
    "*",
    "~root",
    "a b\tc",
]

_no_nul_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\0", b""))
_shellish = st.lists(
    st.sampled_from([*"'\"`$()\\;|&<>{}*?[]~#!\n\t =-", "touch canary", "é", "\x1b]"]),
    max_size=12,
).map("".join)
VALUES = st.one_of(
    _no_nul_bytes.map(lambda b: b.decode("utf-8", "surrogateescape")),
    _shellish,
    st.sampled_from(PAYLOADS),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
        max_size=20,
    ),
)
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]
PRINTF = shutil.which("printf") or "/usr/bin/printf"  # a program exec'd, not a builtin


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _sh(line: str, folder: str, shell: str = "sh") -> bytes:
    """What ``SHELL -c LINE`` prints, started as a list argv (no shell in between)."""
    done = subprocess.run(
        [shell, "-c", _bytes(line)], cwd=folder, capture_output=True, timeout=120, check=False
    )
    return done.stdout


def _words(output: bytes) -> list[bytes]:
    """``printf '%s\\0' ARGS...`` printed each argument and a NUL: the arguments."""
    assert output.endswith(b"\0") or output == b"", output
    return output.split(b"\0")[:-1]


def _list_form(words: list[str]) -> Template:
    return Template.of(words)


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield name


def _no_canary(folder: str) -> None:
    assert not (Path(folder) / "canary").exists()


# -- the list form: each value one word ------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_value_arrives_as_one_word_through_a_real_shell(folder, shell, payload):
    template = _list_form([PRINTF, "--", "%s\\0", "{{ v }}", "pre{{ v }}post", "last"])
    line = template.render(lambda name: payload)
    words = _words(_sh(line, folder, shell))
    assert words == [_bytes(payload), _bytes(f"pre{payload}post"), b"last"]
    _no_canary(folder)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    words=st.lists(
        st.one_of(
            VALUES.filter(lambda w: "{{" not in w and "}}" not in w),
            st.sampled_from(["{{ v }}", "x{{ v }}", "{{ v }}.y", "--o={{ v }}"]),
        ),
        max_size=5,
    ),
    value=VALUES,
    program=st.sampled_from(SHELLS),
)
@example(words=["{{ v }}"], value="x\n$(touch canary)", program="sh")
@example(words=["-{{ v }}", "'", '"'], value="`touch canary`", program="sh")
def test_any_list_of_words_arrives_word_for_word(folder, words, value, program):
    """The property, over any words and any value: what the shell passes to printf is the
    list's words with the value in them, one argument each, byte-exact."""
    template = _list_form(["printf", "--", "%s\\0", *words, "end"])
    line = template.render(lambda name: value)
    expected = [_bytes(PLACEHOLDER.sub(lambda m: value, w)) for w in words] + [b"end"]
    assert _words(_sh(line, folder, program)) == expected
    _no_canary(folder)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
@example(value="-rf")
def test_a_value_survives_the_wrappers_an_observation_is_sent_in(folder, value):
    """The C-locale prefix, then ``sh -c QUOTED`` as ``sudo -n sh -c`` wraps a root command,
    then the batch script's ``sh -c "$w" "$n" QUOTED``: still one word, byte-exact."""
    line = _list_form(["printf", "--", "%s\\0", "{{ v }}"]).render(lambda name: value)
    observed = OBSERVE_IN_C_LOCALE + line
    assert _words(_sh(observed, folder)) == [_bytes(value)]
    as_root = f"sh -c {quote(observed)}"  # what 'sudo -n sh -c' is given
    assert _words(_sh(as_root, folder, "bash" if "bash" in SHELLS else "sh")) == [_bytes(value)]
    commands = [batch.BatchCommand(observed, 10), batch.BatchCommand(as_root, 10)]
    script = batch.script(commands, "BOUNDARY", 4096, is_root=True)
    done = subprocess.run(
        ["sh", "-c", _bytes(script)], cwd=folder, capture_output=True, timeout=120, check=False
    )
    outputs = batch.parse(done.stdout, 2, "BOUNDARY", 4096)
    assert [_words(o.stdout) for o in outputs] == [[_bytes(value)], [_bytes(value)]]
    _no_canary(folder)


@given(value=VALUES.filter(lambda v: v.startswith("-")) | st.sampled_from(["-rf", "--all"]))
def test_a_value_that_would_be_an_option_is_refused_when_sent(value):
    """Before '--' a command reads options: a value starting with '-' there is not sent."""
    template = _list_form(["rm", "-f", "{{ v }}"])
    with pytest.raises(ValueRefused, match="begins with '-' where rm reads options"):
        template.render(lambda name: value)
    # shown (masked, never sent) it is still rendered, quoted
    assert template.render(lambda name: value, mask=lambda name: False).startswith("rm -f ")
    # after '--', or glued behind a literal, it is an operand: sent
    assert (
        _list_form(["rm", "-f", "--", "{{ v }}"]).render(lambda name: value).endswith(quote(value))
    )
    assert _list_form(["rm", "./{{ v }}"]).render(lambda name: value) == f"rm {quote('./' + value)}"


def test_a_shells_positional_values_are_operands_not_options(folder):
    template = _list_form(["sh", "-c", 'printf "%s\\0" "$1"', "sh", "{{ v }}"])
    line = template.render(lambda name: "-rf; touch canary")
    assert _words(_sh(line, folder)) == [b"-rf; touch canary"]
    _no_canary(folder)


def test_numbers_and_booleans_are_words_as_yaml_means_them():
    template = _list_form(["nvidia-smi", "-i", "{{ i }}", "-pm", 0, "{{ b }}"])
    values = {"i": 2.0, "b": True}
    assert template.render(values.__getitem__) == "nvidia-smi -i 2 -pm 0 true"
    assert template.source == "nvidia-smi -i {{ i }} -pm 0 {{ b }}"


def test_a_secret_is_shown_masked_as_one_word():
    template = _list_form(["curl", "-H", "X-Token: {{ token }}", "--", "http://x"])
    shown = template.render(lambda name: "s3cret", mask=lambda name: name == "token")
    assert shown == "curl -H '***' -- http://x"


# -- the string form: sent as written, no placeholder ------------------------------------------

RUNBOOK = """\
name: t
title: T
summary: s
parameters:
  v: {{type: string, default: {default}, description: d}}
observations:
  o: {{command: echo, parser: lines}}
checks:
  c: {{description: d, none: o, where: "text == 'x'", empty: ok}}
goal: [c]
steps:
  - id: s
    title: S
    run: {run}
"""


def _load(run: str, default: str = "x") -> None:
    loads(RUNBOOK.format(run=run, default=default).encode(), "t.yaml", stem="t")


@settings(max_examples=100, deadline=None)
@given(
    before=st.text(alphabet="abc -|;'\"$()", max_size=12),
    after=st.text(alphabet="abc -|;'\"$()", max_size=12),
)
def test_any_command_string_with_a_placeholder_is_refused_at_load_time(before, after):
    text = f"{before}{{{{ v }}}}{after}"
    with pytest.raises(RunbookInvalid) as raised:
        _load(json.dumps(text))
    line = raised.value.lines[0]
    assert line.startswith("t.yaml:14:"), line
    assert "a placeholder in a command string" in line
    assert "write the command as a list of words" in line


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet="abc -|;$()<>&", min_size=1, max_size=30).filter(str.strip))
def test_a_command_string_with_no_placeholder_is_sent_as_written(text):
    template = Template(text)
    assert template.render(lambda name: pytest.fail("no value is looked up")) == text


def test_the_refusal_says_the_list_form_to_write():
    with pytest.raises(RunbookInvalid) as raised:
        _load("kill -TERM {{ v }}")
    assert raised.value.lines == [
        "t.yaml:14:21: steps[0].run: a placeholder in a command string: its value would be "
        "read by the shell; write the command as a list of words, one value a word: "
        '[kill, -TERM, "{{ v }}"]'
    ]
    with pytest.raises(RunbookInvalid) as raised:
        _load("'fuser -s {{ v }} || rm -f -- {{ v }}'")
    assert raised.value.lines[0].endswith(
        """[sh, -c, 'fuser -s "$1" || rm -f -- "$1"', sh, "{{ v }}"]"""
    )


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ('["{{ v }}", --help]', "steps[0].run[0]: a value cannot be the command to run"),
        ('[sh, -c, "{{ v }}"]', "steps[0].run[2]: sh -c runs its script as code"),
        ('[bash, -c, "echo {{ v }}", x]', "steps[0].run[2]: bash -c runs its script as code"),
        ('[sh, "{{ v }}"]', "steps[0].run[1]: sh can run its words as code"),
        ('[eval, echo, "{{ v }}"]', "steps[0].run[2]: eval can run its words as code"),
        ('[xargs, kill, "{{ v }}"]', "steps[0].run[2]: xargs can run its words as code"),
        ('[sudo, kill, "{{ v }}"]', "steps[0].run[2]: sudo can run its words as code"),
        ('[find, /tmp, -name, "{{ v }}"]', "steps[0].run[3]: find can run its words as code"),
        ('[awk, "{{ v }}"]', "steps[0].run[1]: awk can run its words as code"),
        ('[echo, "{{ nope }}"]', "steps[0].run[1]: unknown parameter 'nope'"),
        ('[echo, "{{ v"]', "steps[0].run[1]: '{{' or '}}' that is not a {{ name }} placeholder"),
    ],
)
def test_a_list_form_whose_value_could_be_a_command_is_refused(run, message):
    with pytest.raises(RunbookInvalid) as raised:
        _load(run)
    assert any(message in line for line in raised.value.lines), raised.value.lines


@pytest.mark.parametrize(
    "run",
    [
        '[mktemp, -p, "{{ v }}"]',  # refused by the allow-list of the string form's days
        '[sh, -c, printf "%s" "$1", sh, "{{ v }}"]',
        '[systemctl, stop, --, "{{ v }}.service"]',
        '[kill, -TERM, "{{ v }}"]',
    ],
)
def test_harmless_list_forms_load(run):
    _load(run)


def test_a_default_that_would_be_an_option_is_refused_at_load_time():
    with pytest.raises(RunbookInvalid) as raised:
        _load('[rm, -f, "{{ v }}"]', default="'-rf'")
    assert "the default of 'v' ('-rf') begins with '-' where rm reads options" in str(raised.value)
    _load('[rm, -f, --, "{{ v }}"]', default="'-rf'")


def test_a_set_value_that_would_be_an_option_is_bad_input():
    from runbook_runner.format.parameters import ParameterError, resolve_parameters

    runbook = loads(RUNBOOK.format(run='[rm, -f, "{{ v }}"]', default="x").encode(), "t.yaml")
    with pytest.raises(ParameterError, match="--set v=-rf: begins with '-' where rm reads"):
        resolve_parameters(runbook, ["v=-rf"])
    assert resolve_parameters(runbook, ["v=./-rf"])["v"] == "./-rf"


def test_the_shipped_runbooks_put_every_value_in_the_list_form():
    from conftest import REPO
    from runbook_runner.runbook import load

    for path in sorted((REPO / "runbooks").glob("*.yaml")):
        runbook = load(path)
        templates = [o.command for o in runbook.observations.values() if o.command]
        templates += [s.run for s in runbook.steps if s.run]
        for template in templates:
            assert template.is_list or not template.placeholders, (path.name, template.source)


def test_a_value_from_the_host_that_would_be_an_option_fails_its_step_unsent(tmp_path, capsys):
    """A file the host lists as '-rf' reaches `rm -f` before any '--': the step fails with
    the reason and nothing is sent (the simulated host records no change); with '--' before
    it, the same value is an operand and the step is sent."""
    from runbook_runner.cli import main

    def runbook(words: str) -> Path:
        path = tmp_path / str(len(words)) / "opt.yaml"
        path.parent.mkdir()
        path.write_text(
            "name: opt\ntitle: t\nsummary: s\n"
            "observations:\n  names: {command: cat /etc/names, parser: lines}\n"
            "checks:\n  no-names: {description: d, none: names, empty: ok}\n"
            "goal: [no-names]\nsteps:\n  - id: remove\n    title: t\n"
            f'    run: [{words}, "{{{{ item.text }}}}"]\n'
            "    runs: {for_each_failing: no-names, fixes: [no-names]}\n"
            "    destructive: true\n    affects: files\n"
        )
        return path

    state = tmp_path / "state.yaml"
    state.write_text('files: {/etc/names: "-rf\\n"}\n')
    main(["test", str(runbook("rm, -f")), "--state", str(state)])
    out = "".join(capsys.readouterr())
    assert "not sent: 'rm -f {{ item.text }}': the value '-rf' begins with '-'" in out
    assert "$ nothing" in out  # what changed on the host
    main(["test", str(runbook("rm, -f, --")), "--state", str(state)])
    out = "".join(capsys.readouterr())
    assert "not sent" not in out
    assert "done: remove: -rf" in out  # sent: rm -f -- -rf
