"""Without an OpenSSH client: paramiko's parser reads the ssh config, shaped like ``ssh -G``.

What paramiko may negotiate is held to OpenSSH's defaults, and any option it cannot
honour exactly (Include, Match, canonicalisation, changes to a default list) is refused
by name rather than read differently from ssh.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Sequence
from pathlib import Path

from runbook_runner import localfile
from runbook_runner.errors import SshSetupError
from runbook_runner.ssh.options import option_pair
from runbook_runner.ssh.tokens import expand_path, home

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

    path = ssh_config or home() / ".ssh" / "config"
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
        " ".join(str(expand_path(p, {})) for v in options["userknownhostsfile"] for p in v.split())
    ]
    return options
