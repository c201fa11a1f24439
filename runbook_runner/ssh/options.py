"""From OpenSSH's effective options (``ssh -G``'s keys) to a typed :class:`SshTarget`.

Pure: each option's value is read as OpenSSH reads it (times, counts, lists, paths,
tokens), and an option that changes where or how securely we connect and that we cannot
honour is refused by name. Also ssh's ``-o KEY=VALUE`` words (:func:`option_pair`).
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from runbook_runner.errors import SshSetupError
from runbook_runner.ssh.target import DEFAULT_CONNECT_TIMEOUT, SshTarget
from runbook_runner.ssh.tokens import connection_tokens, expand_path, expand_tokens

Options = Mapping[str, Sequence[str]]

# Options that change where or how securely we connect and that we cannot honour.
# Each maps an effective value to a refusal reason (None: that value is fine).
_UNSUPPORTED: dict[str, Callable[[str], str | None]] = {
    "proxyusefdpass": lambda v: "not supported" if v == "yes" else None,
    "pkcs11provider": lambda v: "PKCS#11 keys are not supported" if v != "none" else None,
    "certificatefile": lambda v: "user certificates are not supported",
    "knownhostscommand": lambda v: (
        "not supported; list the keys in a known_hosts file" if v != "none" else None
    ),
    "bindaddress": lambda v: "not supported",
    "bindinterface": lambda v: "not supported",
}


def option_pair(option: str) -> tuple[str, str]:
    """``KEY=VALUE`` or ``KEY VALUE`` (ssh's ``-o``) -> (key in lower case, value)."""
    key, _, value = option.strip().partition("=")
    if " " in key or "\t" in key:
        key, _, rest = option.strip().partition(" ")
        value = rest.lstrip(" \t=")
    if (
        not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key)
        or not value.strip()
        or any(ord(c) < 32 for c in option)
    ):
        raise SshSetupError(
            f"-o {option!r}: not an ssh option", "give -o KEY=VALUE, e.g. -o Port=2222"
        )
    return key.lower(), value.strip()


def first(options: Options, key: str) -> str | None:
    values = options.get(key)
    return values[0] if values else None


def _yes(options: Options, key: str, default: bool = False) -> bool:
    value = first(options, key)
    return default if value is None else value.lower() in ("yes", "true")


def build_target(
    host: str,
    options: Options,
    *,
    explicit_identities: Sequence[str] = (),
    known_hosts: Path | None = None,
    accept_new: bool = False,
    connect_timeout: float | None = None,
    ssh_config: Path | None = None,
) -> SshTarget:
    """Pure: the typed target from OpenSSH's effective options (``ssh -G``'s keys)."""
    for key, check in _UNSUPPORTED.items():
        for value in options.get(key, ()):
            reason = check(value)
            if reason:
                raise SshSetupError(
                    f"{host}: the ssh config sets {_NAMES.get(key, key)} {value}: {reason}",
                    "remove it for this host (or use a Host block without it) to use runbook",
                )
    notices: list[str] = []
    hostname = first(options, "hostname") or host
    try:
        port = int(first(options, "port") or 22)
    except ValueError:
        raise SshSetupError(f"{host}: bad Port {first(options, 'port')}", "fix it") from None
    user = first(options, "user") or getpass.getuser()
    alias = first(options, "hostkeyalias")
    alias = None if alias in (None, "none") else alias
    tokens = connection_tokens(host, hostname, port, user, alias, first(options, "proxyjump"))
    files: list[str] = [str(expand_path(p, tokens)) for p in explicit_identities]
    for raw in options.get("identityfile", ()):  # with ssh -G, the -i files come first
        path = str(expand_path(raw, tokens))
        if path not in files:
            files.append(path)
    strict = (first(options, "stricthostkeychecking") or "ask").lower()
    strict = {"false": "no", "off": "no", "true": "yes"}.get(strict, strict)
    # StrictHostKeyChecking no is not followed; an unknown key's refusal says why (connect.py).
    if _yes(options, "checkhostip"):
        notices.append(
            f"{host}: CheckHostIP yes in the ssh config: runbook checks the host key by name "
            "(or HostKeyAlias) only, not also by address"
        )
    proxy = first(options, "proxycommand")
    if proxy is not None and proxy != "none":
        proxy = expand_tokens(proxy, {k: tokens[k] for k in "hnpr%"})
    else:
        proxy = None
    timeout_text = first(options, "connecttimeout")
    config_timeout = (
        None if timeout_text in (None, "none") else _seconds(host, "ConnectTimeout", timeout_text)
    )
    user_files = _paths(options, "userknownhostsfile")
    if known_hosts is not None:
        user_files = (known_hosts,)
    return SshTarget(
        host=host,
        hostname=hostname,
        port=port,
        user=user,
        identity_files=tuple(files),
        explicit_identities=tuple(files[: len(explicit_identities)]),
        identities_only=_yes(options, "identitiesonly"),
        identity_agent=_agent(first(options, "identityagent")),
        known_hosts_files=user_files,
        global_known_hosts_files=_paths(options, "globalknownhostsfile"),
        host_key_alias=alias,
        strict_host_key_checking=strict,
        accept_new_host_key=accept_new or strict == "accept-new",
        hash_known_hosts=_yes(options, "hashknownhosts"),
        connect_timeout=connect_timeout or config_timeout or DEFAULT_CONNECT_TIMEOUT,
        server_alive_interval=int(
            _seconds(host, "ServerAliveInterval", first(options, "serveraliveinterval") or "0")
        ),
        server_alive_count_max=_count(
            host, "ServerAliveCountMax", first(options, "serveralivecountmax") or "3"
        ),
        batch_mode=_yes(options, "batchmode"),
        address_family=(first(options, "addressfamily") or "any").lower(),
        proxy_command=proxy,
        host_key_algorithms=_list(options, "hostkeyalgorithms"),
        kex_algorithms=_list(options, "kexalgorithms"),
        ciphers=_list(options, "ciphers"),
        macs=_list(options, "macs"),
        ssh_config=ssh_config,
        notices=tuple(notices),
    )


_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _seconds(host: str, option: str, text: str) -> float:
    """OpenSSH's time format: ``30``, ``90s``, ``1m30s``..."""
    parts = re.findall(r"(\d+)([smhdw]?)", text.lower())
    if not parts or "".join(n + u for n, u in parts) != text.lower():
        raise SshSetupError(f"{host}: {option} {text}: not a time", "give seconds, e.g. 30")
    return float(sum(int(n) * _TIME_UNITS[u] for n, u in parts))


def _count(host: str, option: str, text: str) -> int:
    if not text.isdigit():
        raise SshSetupError(f"{host}: {option} {text}: not a number", "give a whole number")
    return int(text)


_NAMES = {
    "proxyusefdpass": "ProxyUseFdpass",
    "pkcs11provider": "PKCS11Provider",
    "certificatefile": "CertificateFile",
    "knownhostscommand": "KnownHostsCommand",
    "bindaddress": "BindAddress",
    "bindinterface": "BindInterface",
}


def _list(options: Options, key: str) -> tuple[str, ...]:
    value = first(options, key)
    return tuple(v for v in value.split(",") if v) if value else ()


def _paths(options: Options, key: str) -> tuple[Path, ...]:
    paths: list[Path] = []
    for value in options.get(key, ()):
        for word in value.split():
            if word != "none":
                paths.append(expand_path(word, {}))
    return tuple(paths)


def _agent(value: str | None) -> str | None:
    """IdentityAgent: ``none``, ``SSH_AUTH_SOCK`` (the default), ``$VAR`` or a path."""
    if value is None or value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value == "none":
        return None
    if value.startswith("$"):
        return os.environ.get(value[1:].strip("{}")) or None
    return str(expand_path(value, {}))
