"""Values never run: a placeholder is a whole shell word, proven through a real ``sh -c``.

Every template shape the loader allows is fed arbitrary bytes (quotes, $(...),
backticks, newlines, bytes that are not UTF-8) and run by a real ``sh``; the
argument must arrive byte-exact and a canary command must never run. The
shapes the loader rejects are shown to be dangerous, which is why they are rejected.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from runbook_runner.format.template import PLACEHOLDER, Template, quote, shell_problems
from runbook_runner.observe import PARSERS

# (template, what printf prints around the value)
ALLOWED_SHAPES = [
    ("printf '%s' {{ v }}", b"", b""),
    ("printf '%s' pre{{ v }}", b"pre", b""),
    ("printf '%s' {{ v }}.post", b"", b".post"),
    ("printf '%s' --opt={{ v }}", b"--opt=", b""),
    ("printf '%s' -i{{ v }}", b"-i", b""),
    ("printf '%s' {{ v }}; true", b"", b""),
    ("true && printf '%s' {{ v }} | cat", b"", b""),
    ("if true; then printf '%s' {{ v }}; fi", b"", b""),
    ("printf '%s' {{ v }}>&1", b"", b""),
    ("printf -- '%s' {{ v }} 2>/dev/null", b"", b""),
    ("printf '%s' x{{ v }}:{{ v }}y", None, None),  # two copies: checked separately
]

REJECTED_SHAPES = [
    "printf '%s' \"{{ v }}\"",
    "printf '%s' \"GPU {{ v }} busy\"",
    "printf '%s' '{{v}}'",
    "printf '%s' $(printf '%s' {{ v }})",
    "printf '%s' `printf '%s' {{ v }}`",
    "printf '%s' ${{ v }}",
    "printf '%s' \\{{ v }}",
    "printf '%s' \"x\"{{ v }}",
    "printf '%s' {{ v }}'x'",
    "printf '%s' ${X:-{{ v }}}",
    "true # {{ v }}",
    "{{ v }} --version",
    "true | {{ v }}",
    "cat <<EOF\n{{ v }}\nEOF",
    "eval printf %s {{ v }}",
    "sh -c {{ v }}",
    "sudo -n sh -ec {{ v }}",
    "ssh host printf %s {{ v }}",
    # found by test_any_template_the_loader_accepts_runs_no_value:
    "true\n``eval {{ v }}",  # an empty substitution before eval
    "sh -c -eval {{ v }}",  # options after -c: the script is the first operand
    'e"v"al printf %s {{ v }}',
    "$CMD printf %s {{ v }}",
    # a value is data only as an operand of a command that never runs its operands:
    "A={{ v }} printf '%s' x",
    "sh -c 'printf %s \"$1\"' _ {{ v }}",
    "printf {{ v }}",
    "printf >x {{ v }} y",
    "printf $F {{ v }}",
    "test -v {{ v }}",
    "test {{ v }} {{ v }}",
    "[ -R {{ v }} ]",
    "test $X {{ v }}",
    'kill() { eval "$1"; }; kill {{ v }}',
    "alias kill=eval\nkill {{ v }}",
    "PATH=/tmp; rm {{ v }}",
    "echo x > {{ v }}",
    "echo x 2>{{ v }}",
    "./kill {{ v }}",
    "tar -cf x {{ v }}",
    "sort {{ v }}",
]

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
    "`; touch canary; `",
    "x; touch canary",
    "\\'\"; touch canary; #",  # through bash's $'...'
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


SHELLS = [b"sh"] + ([b"bash"] if shutil.which("bash") else [])


def _sh(command: str, folder: str, shell: bytes = b"sh") -> bytes:
    """What ``sh -c COMMAND`` prints, run as a list argv (no shell in between)."""
    argv = [shell, b"-c", command.encode("utf-8", "surrogateescape")]
    done = subprocess.run(argv, cwd=folder, capture_output=True, timeout=120, check=False)
    return done.stdout


def _render(template: str, value: str) -> str:
    return Template(template).render(lambda name: value)


@pytest.mark.parametrize("shape", [s for s, _, _ in ALLOWED_SHAPES])
def test_allowed_shapes_pass_the_load_time_check(shape):
    assert shell_problems(shape) == []


@pytest.mark.parametrize("shape", REJECTED_SHAPES)
def test_rejected_shapes_fail_the_load_time_check(shape):
    assert shell_problems(shape), shape


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES, shape=st.sampled_from(ALLOWED_SHAPES))
def test_any_value_arrives_byte_exact_and_nothing_runs(value, shape):
    template, before, after = shape
    with tempfile.TemporaryDirectory() as folder:
        command = _render(template, value)
        raw = value.encode("utf-8", "surrogateescape")
        expected = b"x" + raw + b":" + raw + b"y" if before is None else before + raw + after
        for shell in SHELLS:
            assert _sh(command, folder, shell) == expected
            # as a root step is sent to a non-root login: sudo -n sh -c QUOTED
            assert _sh(f"sh -c {quote(command)}", folder, shell) == expected
        assert os.listdir(folder) == []


@settings(max_examples=60, deadline=None)
@given(name=VALUES)
def test_a_name_the_host_printed_stays_one_argument(name):
    """A GPU name from nvidia-smi's own output goes through the same quoting."""
    safe = name.replace(",", " ").replace("\n", " ").replace("\r", " ")
    output = f"index, name, memory.used [MiB]\n0, {safe}, 100 MiB\n"
    command = "nvidia-smi --query-gpu=index,name,memory.used --format=csv"
    gpus = PARSERS["gpus"].parse(output, 0, command)
    item = gpus[0]
    assume(item.name)
    template = Template("printf '%s' {{ item.name }}")
    assert shell_problems(template.source) == []
    rendered = template.render(lambda n: getattr(item, n[5:]))
    with tempfile.TemporaryDirectory() as folder:
        assert _sh(rendered, folder) == (item.name or "").encode("utf-8", "surrogateescape")
        assert os.listdir(folder) == []


@pytest.mark.parametrize(
    "shape",
    [
        "printf '%s' \"GPU {{ v }}\"",
        "printf '%s' '{{ v }}'",
        "printf '%s' `printf %s {{ v }}`",
        "true # {{ v }}",
        "printf '%s' ${{ v }}",
        "eval printf %s {{ v }}",
        "sh -c {{ v }}",
    ],
)
def test_rejected_shapes_would_have_run_the_value(shape, tmp_path: Path):
    """Why they are rejected: with each, some value runs a command on the host."""
    payloads = [*PAYLOADS, "x\ntouch canary #", "`touch canary`x"]
    ran = False
    for payload in payloads:
        for shell in SHELLS:
            _sh(_render(shape, payload), str(tmp_path), shell)
        ran = ran or (tmp_path / "canary").exists()
    assert ran, f"no payload ran through {shape!r}"
    assert shell_problems(shape)


def test_validate_rejects_a_quoted_placeholder_with_its_position(tmp_path, capsys):
    from runbook_runner.cli import main

    runbook = tmp_path / "quoted.yaml"
    runbook.write_text(
        "name: quoted\ntitle: t\nsummary: s\n"
        "observations:\n  gpus: {command: 'nvidia-smi --query-gpu=index,name --format=csv', "
        "parser: gpus}\n"
        "checks:\n  c: {description: d, every: gpus, expect: index >= 0}\n"
        "goal: [c]\nsteps:\n  - id: s\n    title: s\n"
        '    run: echo "GPU {{ item.name }}"\n    for_each_failing: c\n'
    )
    assert main(["validate", str(runbook)]) == 2
    out = capsys.readouterr().out
    assert "quoted.yaml:12:20: steps[0].run: placeholder inside double quotes" in out
    assert "outside any quotes" in out


_FRAGMENTS = [
    "printf '%s' ",
    "echo ",
    "true ",
    "eval ",
    "sh -c ",
    "cat <<E\n",
    "\nE\n",
    "{{ v }}",
    "{{ v }}",
    "{{ v }}",
    " ",
    "'",
    '"',
    "$(",
    ")",
    "(",
    "`",
    "\\",
    "#",
    "\n",
    "; ",
    " | ",
    " && ",
    "x",
    "=",
    "-",
    "${",
    "}",
    "$",
    "A=",
    " _ ",
    '"$1" ',
]


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    command=st.sampled_from(_FRAGMENTS[:5]),
    parts=st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=8),
)
# Found by this test: a "(" after eval's first word was taken for the start of a new
# command, so the placeholder no longer counted as eval's (bash ran the value).
@example(command="eval ", parts=["A=", "(", ")", "printf '%s' ", "{{ v }}"])
def test_any_template_the_loader_accepts_runs_no_value(command, parts):
    """Random shell text with placeholders: whatever passes the load-time check, no value
    (of the payloads that break out of a wrong context) makes the shell run a command."""
    template = command + "".join(parts)
    assume("{{ v }}" in template and not shell_problems(template))
    with tempfile.TemporaryDirectory() as folder:
        for payload in PAYLOADS:
            command = _render(template, payload)
            for shell in SHELLS:
                subprocess.run(
                    [shell, b"-c", command.encode()],
                    cwd=folder,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
            assert "canary" not in os.listdir(folder), (template, payload)


def test_a_parenthesis_inside_evals_words_does_not_end_eval():
    assert shell_problems("eval A=()printf '%s' {{ v }}")  # bash: eval re-parses the value
    assert shell_problems("eval (x) {{ v }}")
    assert not shell_problems("A=()printf '%s' {{ v }}")  # no eval: the value is an argument
    assert not shell_problems("true; (printf '%s' {{ v }})")  # a subshell where a command starts


# -- placeholders by construction: only an operand of a command that takes it as data ----

# Commands that run, source or re-parse what they are given (the eight of issue 28 first).
# "{}" is where the rest of the command goes.
WRAPPERS = [
    "trap {} EXIT",
    "flock /tmp/lock -c {}",
    "script -qc {} /dev/null",
    "awk {}",
    ". {}",
    "command {}",
    "timeout 5 {}",
    "nohup {}",
    "env {}",
    "env A=1 {}",
    "xargs {}",
    "xargs -0 -- {}",
    "find . -exec {} ;",
    "parallel {}",
    "watch -n 1 {}",
    "sudo {}",
    "sudo -n -u root -- {}",
    "su -c {}",
    "su root -c {}",
    "runuser -u root -- {}",
    "nice {}",
    "nice -n 5 {}",
    "ionice -c 3 {}",
    "chroot / {}",
    "setsid {}",
    "stdbuf -o0 {}",
    "busybox {}",
    "busybox sh -c {}",
    "eval {}",
    "sh -c {}",
    "bash -c 'exec \"$@\"' _ {}",
    "builtin {}",
]
# What the wrapper runs: the value alone, or a command that would take it as data.
INNER = ["{{ v }}", "kill -TERM {{ v }}", "echo {{ v }}", "printf '%s' {{ v }}", "rm -f -- {{ v }}"]
# Where the wrapped command may sit in a longer command.
AROUND = ["{}", "true; {}", "true && {} | cat", "if true; then {}; fi", "( {} )", "{ {}; }", "! {}"]


@settings(max_examples=300, deadline=None)
@given(
    wrapper=st.sampled_from(WRAPPERS),
    inner=st.sampled_from(INNER),
    around=st.sampled_from(AROUND),
    prefix=st.sampled_from(["", "A=1 ", "exec ", "time ", "/usr/bin/", "\\"]),
)
def test_a_placeholder_under_any_wrapper_is_refused(wrapper, inner, around, prefix):
    """Not a list of wrappers to refuse: the command a placeholder is given to is not one
    known to take it as data, so it is refused, whatever that command is."""
    template = around.replace("{}", prefix + wrapper.replace("{}", inner), 1)
    problems = shell_problems(template)
    assert problems, template
    assert {offset for offset, _ in problems} >= {
        m.start() for m in PLACEHOLDER.finditer(template)
    }, template


# The eight wrappers of issue 28, each with a value that makes it run `touch canary`:
# what `validate` accepted before, and what each one did with the value.
ISSUE_28_RUNS = [
    ("trap {{ v }} EXIT", "touch canary"),
    ("flock lock -c {{ v }}", "touch canary"),
    ("script -qc {{ v }} /dev/null", "touch canary"),
    ("awk {{ v }} </dev/null", 'BEGIN{system("touch canary")}'),
    (". {{ v }}", "./payload"),
    ("command {{ v }} canary", "touch"),
    ("timeout 5 {{ v }} canary", "touch"),
    ("nohup {{ v }} canary", "touch"),
]


@pytest.mark.parametrize(("template", "value"), ISSUE_28_RUNS)
def test_the_eight_wrappers_of_issue_28_run_the_value_and_are_refused(
    template, value, tmp_path: Path
):
    tool = template.split()[0]
    if tool not in (".", "trap", "command") and shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    (tmp_path / "payload").write_text("touch canary\n")
    subprocess.run(
        ["sh", "-c", _render(template, value)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (tmp_path / "canary").exists(), "the wrapper did not run the value"
    assert shell_problems(template), template


# Every form the rule accepts, one per command of the allow-list (those installed here).
ACCEPTED_FORMS = [
    "kill -0 {{ v }}",
    "kill -s 0 -- {{ v }}",
    "echo {{ v }}",
    "echo -n x{{ v }}",
    "printf '%s' {{ v }}",
    "printf -- '%s\\n' a {{ v }}",
    "cat -- {{ v }}",
    "ls -d -- {{ v }}",
    "stat -- {{ v }}",
    "grep -e {{ v }} /dev/null",
    "grep -F -- {{ v }} /dev/null",
    "head -c 1 {{ v }}",
    "tail -c 1 -- {{ v }}",
    "wc -c {{ v }}",
    "df -- {{ v }}",
    "du -s -- {{ v }}",
    "rm -f -- {{ v }}",
    "rmdir -- {{ v }}",
    "pgrep -f -- {{ v }}",
    "pkill -0 -f -- {{ v }}",
    "ps -p {{ v }}",
    "fuser -s {{ v }}",
    "fuser -s {{ v }} || rm -f -- {{ v }}",
    "test -e {{ v }}",
    "test {{ v }} = x",
    "test -n {{ v }} -a x != {{ v }}",
    "[ -z {{ v }} ]",
    "[ x -eq {{ v }} ]",
    "systemctl --no-pager status -- {{ v }}",
    "nvidia-smi -i {{ v }} -pm 0",
    "sort -- {{ v }}",
    "tar -tf /dev/null -- {{ v }}",
    "true {{ v }}",
    "false {{ v }}",
]
_INSTALLED_FORMS = [
    form
    for form in ACCEPTED_FORMS
    if form.split()[0] in ("kill", "echo", "printf", "test", "[", "true", "false")
    or shutil.which(form.split()[0])
]


@pytest.mark.parametrize("form", ACCEPTED_FORMS)
def test_each_allowed_command_is_accepted(form):
    assert shell_problems(form) == [], form


def test_the_allow_list_is_the_documented_one():
    """The runbook-format page's placeholder paragraph names every command of the allow-list."""
    from runbook_runner.format.template import allowed_commands

    readme = (Path(__file__).parent.parent / "docs" / "manual" / "runbook-format.md").read_text()
    paragraph = readme[readme.index("Placeholders by construction") :][:3000]
    for name in allowed_commands():
        assert f"`{name}`" in paragraph, name


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES, form=st.sampled_from(_INSTALLED_FORMS))
def test_arbitrary_bytes_through_every_accepted_form_never_run(value, form):
    """Every accepted form, with arbitrary bytes (and the breakout payloads), run by a
    real sh and bash, as is and as a root step is sent (sh -c QUOTED): nothing runs."""
    with tempfile.TemporaryDirectory() as folder:
        for payload in (value, *PAYLOADS):
            command = _render(form, payload)
            for shell in SHELLS:
                for line in (command, f"sh -c {quote(command)}"):
                    subprocess.run(
                        [shell, b"-c", line.encode("utf-8", "surrogateescape")],
                        cwd=folder,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=120,
                        check=False,
                    )
            assert os.listdir(folder) == [], (form, payload)


def test_bash_printf_v_and_test_v_run_a_subscript_so_they_are_refused(tmp_path: Path):
    """Why printf's format and test's -v operand are not data positions in bash."""
    if not shutil.which("bash"):
        pytest.skip("no bash")
    value = "a[$(touch canary)]"
    for template in ("test -v {{ v }}", "printf -v {{ v }} x"):
        subprocess.run(["bash", "-c", _render(template, value)], cwd=tmp_path, check=False)
        assert (tmp_path / "canary").exists(), template
        (tmp_path / "canary").unlink()
        assert shell_problems(template), template
    assert not shell_problems("printf -v X '%s' {{ v }}")  # after the format: data


def test_validate_names_the_command_and_the_fix(tmp_path, capsys):
    from runbook_runner.cli import main

    runbook = tmp_path / "wrapped.yaml"
    runbook.write_text(
        "name: wrapped\ntitle: t\nsummary: s\n"
        "parameters:\n  v: {type: string, default: x, description: d}\n"
        "observations:\n  o: {command: 'true', parser: lines}\n"
        "checks:\n  c: {description: d, every: o, expect: 'true'}\n"
        "goal: [c]\nsteps:\n  - id: s\n    title: s\n"
        "    run: timeout 5 {{ v }}\n"
    )
    assert main(["validate", str(runbook)]) == 2
    out = capsys.readouterr().out
    assert "wrapped.yaml:14:20: steps[0].run: placeholder in an operand of 'timeout'" in out
    assert "kill -TERM {{ item.pid }}" in out


def test_a_number_glued_to_a_redirection_stays_a_word():
    """``{{ v }}>&1`` with v=0 would be ``0>&1``, a redirection of fd 0, not the word 0."""
    with tempfile.TemporaryDirectory() as folder:
        for value in ("0", "2", "10"):
            command = _render("printf '%s' {{ v }}>&1", value)
            for shell in SHELLS:
                assert _sh(command, folder, shell) == value.encode()
    assert _render("kill -TERM {{ v }}", "4120") == "kill -TERM 4120"  # unchanged elsewhere
