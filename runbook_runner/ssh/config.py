"""Where and how to connect, as the user's OpenSSH would: ``ssh -G`` resolves the config.

When an OpenSSH client is installed, ``ssh -G [-F FILE] [-l USER] [-p PORT] HOST``
prints the effective configuration for the host (Include, Match, tokens,
canonicalisation, first-match-wins: all done by OpenSSH itself, without touching
the network). Without one, paramiko's parser stands in, and any option it cannot
honour that changes where or how securely we connect is refused by name.

Everything here is pure apart from the one subprocess call (:func:`run_ssh_g`) and
reading the fallback's config file.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import pwd
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.errors import SshSetupError

Options = Mapping[str, Sequence[str]]

DEFAULT_IDENTITIES = (
    "~/.ssh/id_rsa",
    "~/.ssh/id_ecdsa",
    "~/.ssh/id_ecdsa_sk",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ed25519_sk",
    "~/.ssh/id_xmss",
    "~/.ssh/id_dsa",
)
# OpenSSH 9.2's defaults: without an OpenSSH client, what paramiko may negotiate is held
# to what ssh would allow (paramiko alone would still offer CBC ciphers and MD5 MACs).
OPENSSH_DEFAULT_ALGORITHMS = {
    "kexalgorithms": "sntrup761x25519-sha512@openssh.com,curve25519-sha256,"
    "curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,"
    "diffie-hellman-group-exchange-sha256,diffie-hellman-group16-sha512,"
    "diffie-hellman-group18-sha512,diffie-hellman-group14-sha256",
    "ciphers": "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,"
    "aes128-gcm@openssh.com,aes256-gcm@openssh.com",
    "macs": "umac-64-etm@openssh.com,umac-128-etm@openssh.com,hmac-sha2-256-etm@openssh.com,"
    "hmac-sha2-512-etm@openssh.com,hmac-sha1-etm@openssh.com,umac-64@openssh.com,"
    "umac-128@openssh.com,hmac-sha2-256,hmac-sha2-512,hmac-sha1",
    "hostkeyalgorithms": "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,"
    "ecdsa-sha2-nistp521,sk-ssh-ed25519@openssh.com,sk-ecdsa-sha2-nistp256@openssh.com,"
    "rsa-sha2-512,rsa-sha2-256",
}
DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_JUMPS = 10  # a ProxyJump loop (a -> b -> a) is refused, not followed forever

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


@dataclass(frozen=True)
class SshTarget:
    """One resolved connection (the host, or a jump host on the way to it)."""

    host: str  # as the user named it (used in messages)
    hostname: str  # what to connect to
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()  # in OpenSSH's order; missing ones are skipped
    explicit_identities: tuple[str, ...] = ()  # given with -i: a problem with one is an error
    identities_only: bool = False
    identity_agent: str | None = None  # the agent's socket; None: no agent
    known_hosts_files: tuple[Path, ...] = ()  # UserKnownHostsFile, in order
    global_known_hosts_files: tuple[Path, ...] = ()  # GlobalKnownHostsFile
    host_key_alias: str | None = None
    strict_host_key_checking: str = "ask"
    accept_new_host_key: bool = False
    hash_known_hosts: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    server_alive_interval: int = 0
    server_alive_count_max: int = 3
    batch_mode: bool = False
    address_family: str = "any"
    proxy_command: str | None = None  # tokens expanded; run with the user's shell
    via: SshTarget | None = None  # the (resolved) jump host this one is reached through
    host_key_algorithms: tuple[str, ...] = ()  # empty: paramiko's own
    kex_algorithms: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    macs: tuple[str, ...] = ()
    ssh_config: Path | None = None
    notices: tuple[str, ...] = field(default=(), compare=False)

    @property
    def label(self) -> str:
        return self.host if self.port == 22 else f"{self.host}:{self.port}"

    @property
    def known_hosts(self) -> Path:
        """Where an accepted new key is recorded: the first UserKnownHostsFile."""
        if self.known_hosts_files:
            return self.known_hosts_files[0]
        return _home() / ".ssh" / "known_hosts"

    @property
    def host_key_name(self) -> str:
        """The name known_hosts is searched for, as OpenSSH forms it."""
        if self.host_key_alias:
            return self.host_key_alias.lower()
        name = self.hostname.lower()
        return name if self.port == 22 else f"[{name}]:{self.port}"

    @property
    def host_key_plain_name(self) -> str | None:
        """The port-less name OpenSSH also tries for a port other than 22 (no HostKeyAlias)."""
        if self.host_key_alias or self.port == 22:
            return None
        return self.hostname.lower()

    @property
    def route(self) -> tuple[SshTarget, ...]:
        """The jump hosts, first to last, then this host."""
        hops: list[SshTarget] = []
        hop: SshTarget | None = self
        while hop is not None:
            hops.append(hop)
            hop = hop.via
        return tuple(reversed(hops))


def _home() -> Path:
    """OpenSSH expands ``~`` with the password database's home, not $HOME."""
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return Path.home()


def ssh_program() -> str | None:
    return shutil.which("ssh")


def resolve_target(
    host: str,
    *,
    port: int | None = None,
    user: str | None = None,
    identity_files: Sequence[str] | None = None,
    known_hosts: Path | None = None,
    accept_new_host_key: bool = False,
    connect_timeout: float | None = None,
    ssh_config: Path | None = None,
    ssh: str | None = "auto",
    options: Sequence[str] = (),
    jump: str | None = None,
) -> SshTarget:
    """The effective target, with every jump host resolved the same way.

    ``ssh``: the OpenSSH client to ask (``"auto"``: the one on PATH; ``None``: use
    paramiko's parser as the fallback does). ``options`` (``KEY=VALUE``, ssh's ``-o``) and
    ``jump`` (ssh's ``-J``) apply to the host itself, as for ssh: not to its jump hosts.
    """
    program = ssh_program() if ssh == "auto" else ssh
    if "@" in host and user is None:
        user, host = host.rsplit("@", 1)
    _check_host_word(host)
    if port is not None and not 0 < port < 65536:
        raise SshSetupError(f"--port {port}: not a TCP port", "give a port from 1 to 65535")
    # Any file ssh -F reads: /dev/null too (no configuration at all), not a folder.
    if ssh_config is not None and (not ssh_config.exists() or ssh_config.is_dir()):
        what = "a folder" if ssh_config.is_dir() else "no such file"
        raise SshSetupError(f"{ssh_config}: {what}", "give an existing file to --ssh-config")
    for option in options:
        option_pair(option)
    if jump is not None:
        for hop in jump.split(","):
            parse_jump(hop.strip())
    settings = _Settings(
        program=program,
        ssh_config=ssh_config,
        known_hosts=known_hosts,
        accept_new=accept_new_host_key,
        connect_timeout=connect_timeout,
        options=tuple(options),
    )
    return _resolve(settings, host, user, port, tuple(identity_files or ()), jump or None, 0)


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


@dataclass(frozen=True)
class _Settings:
    program: str | None
    ssh_config: Path | None
    known_hosts: Path | None
    accept_new: bool
    connect_timeout: float | None
    options: tuple[str, ...] = ()  # -o KEY=VALUE, for the host itself (depth 0)


def _check_host_word(host: str) -> None:
    if not host or host.startswith("-") or any(c.isspace() or ord(c) < 32 for c in host):
        raise SshSetupError(f"{host!r}: not a host name", "give a host name, address or Host alias")


def _resolve(
    settings: _Settings,
    host: str,
    user: str | None,
    port: int | None,
    identities: tuple[str, ...],
    jump_override: str | None,
    depth: int,
) -> SshTarget:
    if depth > MAX_JUMPS:
        raise SshSetupError(
            f"{host}: more than {MAX_JUMPS} jump hosts; is there a ProxyJump loop?",
            "check the ProxyJump lines of your ssh config",
        )
    options: dict[str, list[str]] | None = None
    extra = settings.options if depth == 0 else ()
    if settings.program is not None:
        options = run_ssh_g(
            settings.program,
            host,
            settings.ssh_config,
            user,
            port,
            jump_override,
            identities,
            extra,
        )
    if options is None:  # no OpenSSH client, or one too old for -G (before 6.8)
        options = fallback_options(
            host, settings.ssh_config, user, port, jump_override, bool(identities), extra
        )
    target = build_target(
        host,
        options,
        explicit_identities=identities,
        known_hosts=settings.known_hosts,
        accept_new=settings.accept_new,
        connect_timeout=settings.connect_timeout,
        ssh_config=settings.ssh_config,
    )
    jump = _first(options, "proxyjump")
    if jump is None or jump == "none":
        return target
    hops = [h.strip() for h in jump.split(",") if h.strip()]
    if not hops:
        return target
    # OpenSSH reaches the last hop with "-J <the hops before it>" (which overrides that
    # hop's own ProxyJump); a single hop is reached with its own config, ProxyJump included.
    last_user, last_host, last_port = parse_jump(hops[-1])
    via = _resolve(
        settings,
        last_host,
        last_user,
        last_port,
        (),
        ",".join(hops[:-1]) or None,
        depth + 1,
    )
    return _replace(target, via=via)


def _replace(target: SshTarget, **changes: object) -> SshTarget:
    from dataclasses import replace

    return replace(target, **changes)  # type: ignore[arg-type]


def parse_jump(hop: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]`` -> (user, host, port)."""
    text = hop[len("ssh://") :] if hop.startswith("ssh://") else hop
    user, at, rest = text.rpartition("@")
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host, port_text = rest, ""
    _check_host_word(host)
    port: int | None = None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise SshSetupError(f"ProxyJump {hop}: bad port", "fix the ProxyJump line")
        port = int(port_text)
    return (user if at else None) or None, host, port


# -- OpenSSH ------------------------------------------------------------------------


def run_ssh_g(
    program: str,
    host: str,
    ssh_config: Path | None,
    user: str | None,
    port: int | None,
    jump: str | None = None,
    identities: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> dict[str, list[str]] | None:
    """The one subprocess call: OpenSSH's effective configuration for ``host``.

    ``identities`` (-i) go along: with one, ssh adds no default identity files.
    None: this ssh has no -G (OpenSSH before 6.8); the caller falls back.
    """
    argv = [program, "-G"]
    if ssh_config is not None:
        argv += ["-F", str(ssh_config)]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    if jump:
        argv += ["-J", jump]
    for identity in identities:
        argv += ["-i", identity]
    for option in extra:
        argv += ["-o", option]
    argv += ["--", host]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SshSetupError(
            f"cannot ask OpenSSH for the configuration of {host} ({error})",
            "check your OpenSSH client and ssh config",
        ) from None
    if done.returncode != 0 and re.search(r"(illegal|unknown|invalid) option.*G", done.stderr):
        return None
    if done.returncode != 0:
        problem = "; ".join(
            line.strip()
            for line in done.stderr.splitlines()
            if line.strip() and not line.startswith("Pseudo-terminal")
        )
        raise SshSetupError(
            f"OpenSSH rejects the configuration for {host}: {problem or 'ssh -G failed'}",
            "fix your ssh config (ssh -G shows the problem too)",
        )
    return parse_ssh_g(done.stdout)


def parse_ssh_g(text: str) -> dict[str, list[str]]:
    """``key value`` lines -> {key: [values]} (keys repeat for IdentityFile and the like)."""
    options: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            options.setdefault(key.lower(), []).append(value.strip())
    return options


# -- the fallback: paramiko's parser -----------------------------------------------

# Read, but not honoured by paramiko's parser: refused in the fallback.
_FALLBACK_REFUSED = ("include", "canonicalizehostname", "canonicaldomains", "match")


def fallback_options(
    host: str,
    ssh_config: Path | None,
    user: str | None,
    port: int | None,
    jump: str | None,
    has_identities: bool = False,
    extra: Sequence[str] = (),
) -> dict[str, list[str]]:
    """paramiko's view of the config, shaped like ``ssh -G`` output (no OpenSSH client)."""
    import paramiko

    path = ssh_config or _home() / ".ssh" / "config"
    entry: dict[str, object] = {}
    if path.is_file():
        try:
            text = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace")
        except OSError as error:
            raise SshSetupError(f"cannot read {path}: {error.strerror}", "fix the file") from None
        for number, line in enumerate(text.splitlines(), 1):
            words = re.split(r"[\s=]+", line.strip(), maxsplit=1)
            keyword = words[0].lower()
            if keyword in _FALLBACK_REFUSED and not (
                keyword == "canonicalizehostname" and len(words) > 1 and words[1].lower() == "no"
            ):
                raise SshSetupError(
                    f"{path}:{number}: {words[0]} needs OpenSSH to be read exactly, "
                    "and no OpenSSH client with ssh -G is installed",
                    "install an OpenSSH client, or give an ssh config without it (--ssh-config)",
                )
        # OpenSSH reads "#" at the start of a word as a comment ("Port 2222 # lab"); paramiko
        # would keep it in the value.
        text = "\n".join(re.sub(r"\s#.*$", "", line) for line in text.splitlines())
        try:
            config = paramiko.SSHConfig.from_text(text)
            entry = dict(config.lookup(host))
        except Exception as error:  # paramiko raises many kinds for a bad config
            raise SshSetupError(f"cannot read {path}: {error}", "fix the file") from None
    options: dict[str, list[str]] = {}
    for key, value in entry.items():
        options[key] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    for option in reversed(extra):  # as for ssh, the first -o of a key wins over the config
        key, value = option_pair(option)
        if key in _FALLBACK_REFUSED:
            raise SshSetupError(
                f"-o {option}: needs OpenSSH to be read, and no OpenSSH client is installed",
                "install an OpenSSH client",
            )
        if key == "identityfile":
            options[key] = [value, *options.get(key, [])]
            has_identities = True
        else:
            options[key] = [value]
    options["host"] = [host]
    options.setdefault("hostname", [host])
    if user:
        options["user"] = [user]
    options.setdefault("user", [getpass.getuser()])
    if port:
        options["port"] = [str(port)]
    options.setdefault("port", ["22"])
    if jump:
        options["proxyjump"] = [jump]
        options.pop("proxycommand", None)
    elif "proxyjump" in options and "proxycommand" in options:
        # For OpenSSH the one found first wins; paramiko's result does not say which that was.
        raise SshSetupError(
            f"{path}: both ProxyJump and ProxyCommand apply to {host}; which one wins needs "
            "OpenSSH to read the config, and no OpenSSH client with ssh -G is installed",
            "install an OpenSSH client, or set only one of them for this host",
        )
    if not has_identities:  # as for ssh: the defaults only when no -i and no IdentityFile
        options.setdefault("identityfile", list(DEFAULT_IDENTITIES))
    for key in OPENSSH_DEFAULT_ALGORITHMS:
        if options.get(key) and options[key][0][:1] in ("+", "-", "^"):
            raise SshSetupError(
                f"{path}: {key} {options[key][0]}: changing OpenSSH's default list needs OpenSSH "
                "to read it, and no OpenSSH client with ssh -G is installed",
                "install an OpenSSH client, or list the algorithms in full",
            )
    for key, value in OPENSSH_DEFAULT_ALGORITHMS.items():
        options.setdefault(key, [value])
    options.setdefault("userknownhostsfile", ["~/.ssh/known_hosts ~/.ssh/known_hosts2"])
    options.setdefault(
        "globalknownhostsfile", ["/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"]
    )
    options["userknownhostsfile"] = [
        " ".join(str(_expand_path(p, {})) for v in options["userknownhostsfile"] for p in v.split())
    ]
    return options


# -- from effective options to a target ----------------------------------------------


def _first(options: Options, key: str) -> str | None:
    values = options.get(key)
    return values[0] if values else None


def _yes(options: Options, key: str, default: bool = False) -> bool:
    value = _first(options, key)
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
    hostname = _first(options, "hostname") or host
    try:
        port = int(_first(options, "port") or 22)
    except ValueError:
        raise SshSetupError(f"{host}: bad Port {_first(options, 'port')}", "fix it") from None
    user = _first(options, "user") or getpass.getuser()
    alias = _first(options, "hostkeyalias")
    alias = None if alias in (None, "none") else alias
    tokens = _tokens(host, hostname, port, user, alias, _first(options, "proxyjump"))
    files: list[str] = [str(_expand_path(p, tokens)) for p in explicit_identities]
    for raw in options.get("identityfile", ()):  # with ssh -G, the -i files come first
        path = str(_expand_path(raw, tokens))
        if path not in files:
            files.append(path)
    strict = (_first(options, "stricthostkeychecking") or "ask").lower()
    strict = {"false": "no", "off": "no", "true": "yes"}.get(strict, strict)
    # StrictHostKeyChecking no is not followed; an unknown key's refusal says why (connect.py).
    if _yes(options, "checkhostip"):
        notices.append(
            f"{host}: CheckHostIP yes in the ssh config: runbook checks the host key by name "
            "(or HostKeyAlias) only, not also by address"
        )
    proxy = _first(options, "proxycommand")
    if proxy is not None and proxy != "none":
        proxy = expand_tokens(proxy, {k: tokens[k] for k in "hnpr%"})
    else:
        proxy = None
    timeout_text = _first(options, "connecttimeout")
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
        identity_agent=_agent(_first(options, "identityagent")),
        known_hosts_files=user_files,
        global_known_hosts_files=_paths(options, "globalknownhostsfile"),
        host_key_alias=alias,
        strict_host_key_checking=strict,
        accept_new_host_key=accept_new or strict == "accept-new",
        hash_known_hosts=_yes(options, "hashknownhosts"),
        connect_timeout=connect_timeout or config_timeout or DEFAULT_CONNECT_TIMEOUT,
        server_alive_interval=int(
            _seconds(host, "ServerAliveInterval", _first(options, "serveraliveinterval") or "0")
        ),
        server_alive_count_max=_count(
            host, "ServerAliveCountMax", _first(options, "serveralivecountmax") or "3"
        ),
        batch_mode=_yes(options, "batchmode"),
        address_family=(_first(options, "addressfamily") or "any").lower(),
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
    value = _first(options, key)
    return tuple(v for v in value.split(",") if v) if value else ()


def _paths(options: Options, key: str) -> tuple[Path, ...]:
    paths: list[Path] = []
    for value in options.get(key, ()):
        for word in value.split():
            if word != "none":
                paths.append(_expand_path(word, {}))
    return tuple(paths)


def _agent(value: str | None) -> str | None:
    """IdentityAgent: ``none``, ``SSH_AUTH_SOCK`` (the default), ``$VAR`` or a path."""
    if value is None or value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value == "none":
        return None
    if value.startswith("$"):
        return os.environ.get(value[1:].strip("{}")) or None
    return str(_expand_path(value, {}))


def _tokens(
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
        "d": str(_home()),
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


def _expand_path(raw: str, tokens: Mapping[str, str]) -> Path:
    text = expand_tokens(raw, tokens) if tokens else raw
    text = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), text)
    if text == "~" or text.startswith("~/"):
        text = str(_home()) + text[1:]
    elif text.startswith("~"):
        name, _, rest = text[1:].partition("/")
        with contextlib.suppress(KeyError):
            text = str(Path(pwd.getpwnam(name).pw_dir) / rest)
    return Path(text)  # a relative path is relative to the working folder, as for ssh
