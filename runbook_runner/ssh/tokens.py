"""OpenSSH's expansions in a config value: ``%x`` tokens, ``~`` and ``${VAR}`` in paths."""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import pwd
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from runbook_runner.errors import SshSetupError


def home() -> Path:
    """OpenSSH expands ``~`` with the password database's home, not $HOME."""
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return Path.home()


def connection_tokens(
    host: str, hostname: str, port: int, user: str, alias: str | None, jump: str | None
) -> dict[str, str]:
    local = socket.gethostname()
    jump_text = "" if jump in (None, "none") else str(jump)
    connection = hashlib.sha1(
        f"{local}{hostname}{port}{user}{jump_text}".encode(), usedforsecurity=False
    ).hexdigest()
    return {
        "%": "%",
        "C": connection,
        "d": str(home()),
        "h": hostname,
        "i": str(os.getuid()),
        "j": jump_text,
        "k": alias or hostname,
        "L": local.split(".")[0],
        "l": local,
        "n": host,
        "p": str(port),
        "r": user,
        "u": getpass.getuser(),
    }


def expand_tokens(text: str, tokens: Mapping[str, str]) -> str:
    """OpenSSH's ``%x`` tokens; an unknown one is an error, as it is for ssh."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%" and index + 1 < len(text):
            token = text[index + 1]
            if token not in tokens:
                raise SshSetupError(
                    f"unknown token %{token} in {text!r}", "see TOKENS in ssh_config(5)"
                )
            out.append(tokens[token])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def expand_path(raw: str, tokens: Mapping[str, str]) -> Path:
    text = expand_tokens(raw, tokens) if tokens else raw
    text = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), text)
    if text == "~" or text.startswith("~/"):
        text = str(home()) + text[1:]
    elif text.startswith("~"):
        name, _, rest = text[1:].partition("/")
        with contextlib.suppress(KeyError):
            text = str(Path(pwd.getpwnam(name).pw_dir) / rest)
    return Path(text)  # a relative path is relative to the working folder, as for ssh
