"""What Ansible and clush users type without reading (issue 35, item 4), each answered with
the exact message; and shell completion for bash and zsh through argcomplete, driven by a real
bash and by argcomplete's own protocol."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runbook_runner.cli import build_parser, main
from runbook_runner.cli.habits import looks_like_inventory
from runbook_runner.exitcodes import ExitCode

REPO = Path(__file__).resolve().parent.parent

INI = "# the lab\n[gpus]\ngpu1 ansible_host=10.0.0.1\ngpu2\n\n[gpus:vars]\nansible_user=ops\n"
INI_NO_GROUP = "gpu1 ansible_host=10.0.0.1 ansible_port=2222\ngpu[2:4]\n"
YAML = "all:\n  children:\n    gpus:\n      hosts:\n        gpu1: {ansible_host: 10.0.0.1}\n"


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("text", [INI, INI_NO_GROUP, YAML], ids=["ini", "ini-no-group", "yaml"])
@pytest.mark.parametrize("verb", ["run", "check", "plan"])
def test_dash_i_with_an_inventory_names_the_option_it_was_meant_for(verb, text, tmp_path, capsys):
    inventory = tmp_path / "hosts"
    inventory.write_text(text)
    code, out, err = cli(capsys, verb, "gpu-oom-recovery", "-i", str(inventory), "--host", "h")
    assert code == ExitCode.BAD_INPUT == 2
    assert err == (
        f"runbook {verb}: -i {inventory}: that is an inventory: use --inventory {inventory}; "
        f"see 'runbook {verb} --help'\n"
    )
    assert out == ""


def test_a_key_file_is_not_taken_for_an_inventory(tmp_path):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    assert not looks_like_inventory(key.read_bytes())
    assert not looks_like_inventory(Path(f"{key}.pub").read_bytes())
    assert not looks_like_inventory(b"")
    assert not looks_like_inventory(b"irrelevant\n")  # one bare word: a bad key file, not hosts
    assert not looks_like_inventory(b"\x00\x01binary\xff")
    assert not looks_like_inventory(b"name: my-runbook\ntitle: not an inventory\nsteps: []\n")
    assert looks_like_inventory(INI.encode())
    assert looks_like_inventory(YAML.encode())


@pytest.mark.parametrize("flag", ["--check", "-C"])
def test_run_check_says_that_plan_is_the_dry_run(flag, capsys):
    code, out, err = cli(capsys, "run", "gpu-oom-recovery", flag, "--host", "h")
    assert code == ExitCode.BAD_INPUT == 2
    assert err == (
        f"runbook run: {flag} is Ansible's dry run: 'runbook plan gpu-oom-recovery ...' is the "
        "dry run (the same options; it changes nothing); see 'runbook run --help'\n"
    )
    assert out == ""


def test_an_unknown_runbook_name_suggests_the_closest(tmp_path, capsys):
    code, _, err = cli(capsys, "show", "gpu-oom-recovry", "--runbooks", str(REPO / "runbooks"))
    assert err == (
        f"runbook: no runbook named 'gpu-oom-recovry' in {REPO / 'runbooks'}; did you mean "
        "'gpu-oom-recovery'? (see 'runbook list', or pass --runbooks DIR)\n"
    )
    assert code == ExitCode.BAD_INPUT
    code, _, err = cli(capsys, "show", "zzz", "--runbooks", str(REPO / "runbooks"))
    assert "(defined: gpu-node-health, gpu-oom-recovery, " in err  # nothing close: all names


def test_dash_w_is_hosts_as_clush_spells_it():
    args = build_parser().parse_args(["check", "gpu-node-health", "-w", "gpu[1-4]", "-w", "@x"])
    assert args.hosts == ["gpu[1-4]", "@x"]
    args = build_parser().parse_args(["run", "gpu-oom-recovery", "-w", "gpu[1-4]"])
    assert args.hosts == ["gpu[1-4]"]


@pytest.mark.ssh
def test_dash_w_checks_the_hosts_of_the_node_set(gpu_host, capsys):
    where = gpu_host.cli_args()
    where[where.index("--host")] = "-w"
    code, out, err = cli(capsys, "check", "gpu-node-health", *where, "--jsonl")
    assert code == ExitCode.OK, err
    assert '"host": "127.0.0.1"' in out
    assert '"outcome": "ok"' in out


# Completion --------------------------------------------------------------------------------


def _runbook_on_path(tmp_path: Path) -> dict[str, str]:
    """A ``runbook`` command on PATH that runs this tree, as the installed script does."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = folder / "runbook"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m runbook_runner "$@"\n')
    script.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{folder}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "RUNBOOK_PATH": str(REPO / "runbooks"),
    }


def bash_complete(tmp_path: Path, line: str) -> list[str]:
    """What a real bash offers on TAB after ``line``, through the code
    ``runbook completion bash`` prints."""
    env = _runbook_on_path(tmp_path)
    program = f"""
eval "$(runbook completion bash)"
COMP_LINE={line!r}
COMP_POINT=${{#COMP_LINE}}
read -r -a COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_TYPE=9
_python_argcomplete runbook "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(
        ["bash", "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [word.strip() for word in done.stdout.splitlines() if word.strip()]


def test_bash_completes_the_subcommands(tmp_path):
    offered = bash_complete(tmp_path, "runbook ")
    assert {"check", "run", "plan", "drill", "show", "completion"} <= set(offered)
    assert bash_complete(tmp_path, "runbook pl") == ["plan"]


def test_bash_completes_runbook_names(tmp_path):
    assert bash_complete(tmp_path, "runbook check gpu-") == ["gpu-node-health", "gpu-oom-recovery"]
    assert bash_complete(tmp_path, "runbook run sglang") == ["sglang-hicache-preflight"]


def test_bash_completes_the_set_names_of_the_chosen_runbook(tmp_path):
    offered = bash_complete(tmp_path, "runbook check gpu-node-health --set ")
    assert offered == ["idle_mib=", "min_available_fraction=", "min_gpus="]
    offered = bash_complete(tmp_path, "runbook run gpu-oom-recovery --host h --set first")
    assert offered == ["first_gpu="]


def _protocol(tmp_path: Path, line: str, shell: str) -> list[str]:
    """argcomplete's protocol as its shell code speaks it (the answer in the file its shell
    code names with ARGCOMPLETE_USE_TEMPFILES)."""
    answer = tmp_path / "answer"
    env = {
        **_runbook_on_path(tmp_path),
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": shell,
        "_ARGCOMPLETE_IFS": "\013",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "COMP_TYPE": "9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "runbook_runner"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [word for word in answer.read_text().split("\013") if word]


def test_zsh_gets_the_set_names_with_the_parameter_help(tmp_path):
    offered = _protocol(tmp_path, "runbook check gpu-node-health --set min", "zsh")
    assert [word.split(":", 1)[0] for word in offered] == ["min_available_fraction=", "min_gpus="]
    assert offered[1].startswith("min_gpus=:GPUs nvidia-smi must list")
    assert offered[1].endswith("(default 1)")
    offered = _protocol(tmp_path, "runbook dr", "zsh")
    assert [word.split(":", 1)[0].strip() for word in offered] == ["drill"]


def test_the_zsh_code_is_zsh(tmp_path):
    zsh = shutil.which("zsh")
    code = subprocess.run(
        [sys.executable, "-m", "runbook_runner", "completion", "zsh"],
        env=_runbook_on_path(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert code.startswith("#compdef runbook")
    if zsh is None:
        pytest.skip("zsh is not installed (scripts/test installs it): its syntax is not checked")
    checked = subprocess.run([zsh, "-n"], input=code, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_a_normal_start_does_not_import_argcomplete():
    program = (
        "import sys\n"
        "from runbook_runner.cli import main\n"
        "main(['list'])\n"
        "assert 'argcomplete' not in sys.modules, 'argcomplete imported on a normal start'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
