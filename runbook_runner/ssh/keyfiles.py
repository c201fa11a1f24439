"""Private and public key files as OpenSSH reads them, before any passphrase is asked:
what is wrong with one, its public key, whether it is encrypted."""

from __future__ import annotations

import base64
import os
import stat
import struct
from pathlib import Path

import paramiko

from runbook_runner import localfile


def key_file_problem(path: Path) -> str | None:
    """What is wrong with a private key file, before reading it (None: looks usable)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "no such file"
    except OSError as error:
        return f"cannot read it ({error.strerror})"
    if stat.S_ISDIR(info.st_mode):
        return "a directory, not a key file"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > localfile.CONFIG_LIMIT:
        return f"larger than {localfile.CONFIG_LIMIT // localfile.MiB} MiB: not a key file"
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError as error:
        return f"cannot read it ({error.strerror})"
    if path.suffix == ".pub" or head.split(b" ", 1)[0] in _PUBLIC_PREFIXES:
        return "a public key; give the private key (the file without .pub)"
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        return (
            f"permissions {stat.S_IMODE(info.st_mode):04o} are too open, so ssh ignores this key; "
            "chmod 600 it"
        )
    return None


_PUBLIC_PREFIXES = {
    b"ssh-ed25519",
    b"ssh-rsa",
    b"ssh-dss",
    b"ecdsa-sha2-nistp256",
    b"ecdsa-sha2-nistp384",
    b"ecdsa-sha2-nistp521",
    b"sk-ssh-ed25519@openssh.com",
    b"sk-ecdsa-sha2-nistp256@openssh.com",
}


def public_blob(path: Path) -> bytes | None:
    """The public key of a key file without its passphrase: the .pub, or OpenSSH's header."""
    blob = public_key_file(Path(f"{path}.pub"))
    if blob is not None:
        return blob
    try:
        text = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace")
    except OSError:
        return None
    if "BEGIN OPENSSH PRIVATE KEY" in text:
        header = _openssh_header(text)
        return header[1] if header else None
    if is_encrypted(path):
        return None
    try:
        return paramiko.PKey.from_path(path).asbytes()
    except (*LOAD_ERRORS, OSError):
        return None


def public_key_file(path: Path) -> bytes | None:
    """The key in a public key file ("TYPE BASE64 [comment]"), if it is one."""
    try:
        words = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace").split()
        return base64.b64decode(words[1], validate=True) if len(words) >= 2 else None
    except (OSError, ValueError):
        return None


def is_encrypted(path: Path) -> bool:
    """Does the key file need a passphrase? (OpenSSH format: its cipher; PEM: its header.)"""
    try:
        text = localfile.read_text(path, localfile.CONFIG_LIMIT, errors="replace")
    except OSError:
        return False
    if "BEGIN OPENSSH PRIVATE KEY" in text:
        header = _openssh_header(text)
        return header is not None and header[0] != b"none"
    return "ENCRYPTED" in text


def _openssh_header(text: str) -> tuple[bytes, bytes] | None:
    """(cipher name, public key blob) of an OpenSSH-format private key file."""
    try:
        body = "".join(line for line in text.splitlines() if line and not line.startswith("-----"))
        data = base64.b64decode(body)
        magic = b"openssh-key-v1\x00"
        if not data.startswith(magic):
            return None
        offset = len(magic)
        fields: list[bytes] = []
        for _ in range(3):  # cipher name, kdf name, kdf options
            (size,) = struct.unpack(">I", data[offset : offset + 4])
            fields.append(data[offset + 4 : offset + 4 + size])
            offset += 4 + size
        offset += 4  # number of keys
        (size,) = struct.unpack(">I", data[offset : offset + 4])
        return fields[0], data[offset + 4 : offset + 4 + size]
    except (ValueError, struct.error):
        return None


LOAD_ERRORS = (paramiko.SSHException, ValueError, TypeError, struct.error, IndexError)
