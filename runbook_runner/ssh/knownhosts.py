"""known_hosts as OpenSSH reads it (hostfile.c), and its verdict on a host's key.

Pure: :func:`parse` turns text into entries (a damaged line becomes a problem
naming file and line, never an exception); :func:`check` decides for one host
name and one offered key. Only :func:`read_files` touches the disk.

OpenSSH's rules, followed here:

- every file (UserKnownHostsFile, then GlobalKnownHostsFile) goes into one pool;
- a host field is a comma list of patterns (``*``, ``?``, ``!negation``,
  ``[host]:port``), or one hashed ``|1|salt|hash`` name; the name looked up is
  ``host``, or ``[host]:port`` for a port other than 22, or the HostKeyAlias as it is;
- any matching line with the offered key: known (a stale line before it does not
  matter); else a matching line with any other key: changed; else: new. A matching
  ``@revoked`` line with the key overrides all of that;
- for a port other than 22 (and no HostKeyAlias) with no key at all under
  ``[host]:port``, a port-less line with the key is accepted too (OpenSSH's
  "checking without port identifier").
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from runbook_runner import localfile

MARKERS = ("@revoked", "@cert-authority")


@dataclass(frozen=True)
class Entry:
    file: str
    line: int
    marker: str | None  # None, "@revoked" or "@cert-authority"
    hosts: str  # the host field as written
    key_type: str
    blob: bytes


@dataclass(frozen=True)
class Parsed:
    entries: tuple[Entry, ...]
    problems: tuple[str, ...]  # "file:line: what is wrong", for damaged lines


def parse(text: str, file: str) -> Parsed:
    entries: list[Entry] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        marker: str | None = None
        if words[0].startswith("@"):
            if words[0] not in MARKERS:
                problems.append(f"{file}:{number}: unknown marker {words[0][:40]}; line skipped")
                continue
            marker, words = words[0], words[1:]
        if len(words) < 3:
            problems.append(f"{file}:{number}: not 'HOSTS KEYTYPE KEY'; line skipped")
            continue
        hosts, key_type, data = words[0], words[1], words[2]
        try:
            blob = base64.b64decode(data, validate=True)
            inner = _blob_type(blob)
        except (binascii.Error, ValueError, struct.error):
            problems.append(f"{file}:{number}: the key is not valid base64 key data; line skipped")
            continue
        if inner != key_type:
            problems.append(
                f"{file}:{number}: the line says {key_type[:40]} but the key is {inner[:40]}; "
                "line skipped"
            )
            continue
        entries.append(Entry(file, number, marker, hosts, key_type, blob))
    return Parsed(tuple(entries), tuple(problems))


def _blob_type(blob: bytes) -> str:
    (size,) = struct.unpack(">I", blob[:4])
    if size > len(blob) - 4 or size == 0:
        raise ValueError("truncated key")
    return blob[4 : 4 + size].decode("ascii")


# Parsed files by (path, mtime, size, inode): a fleet run reads the same file per host.
_cache: dict[tuple[str, int, int, int], Parsed] = {}
_cache_lock = threading.Lock()


def read_files(paths: Iterable[Path]) -> Parsed:
    """Every file that exists, in order, as one pool (missing files are fine, as for ssh)."""
    entries: list[Entry] = []
    problems: list[str] = []
    for path in paths:
        try:
            stat = path.stat()
            version = (str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino)
            with _cache_lock:
                cached = _cache.get(version)
            if cached is not None:  # a fleet connects to many hosts with one known_hosts
                entries.extend(cached.entries)
                problems.extend(cached.problems)
                continue
            text = localfile.read_text(path, localfile.LIST_LIMIT, errors="replace")
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            problems.append(f"{path}: a directory, not a known_hosts file; skipped")
            continue
        except OSError as error:
            problems.append(f"{path}: cannot read it ({error.strerror}); skipped")
            continue
        parsed = parse(text, str(path))
        with _cache_lock:
            if len(_cache) > 64:
                _cache.clear()
            _cache[version] = parsed
        entries.extend(parsed.entries)
        problems.extend(parsed.problems)
    return Parsed(tuple(entries), tuple(problems))


def host_matches(hosts: str, name: str) -> bool:
    """OpenSSH's match_hostname: a negated match vetoes; hashed names are compared by HMAC."""
    name = name.lower()
    if hosts.startswith("|1|"):
        try:
            _, _, salt64, digest64 = hosts.split("|", 3)
            salt = base64.b64decode(salt64, validate=True)
            digest = base64.b64decode(digest64, validate=True)
        except (ValueError, binascii.Error):
            return False
        mine = hmac.new(salt, name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mine, digest)
    matched = False
    for pattern in hosts.lower().split(","):
        negated = pattern.startswith("!")
        if negated:
            pattern = pattern[1:]
        if _glob(name, pattern):
            if negated:
                return False
            matched = True
    return matched


def _glob(name: str, pattern: str) -> bool:
    # OpenSSH patterns know only * and ?; brackets are literal ("[host]:port").
    escaped = pattern.replace("[", "[[]")
    return fnmatch.fnmatchcase(name, escaped)


def hash_name(name: str, salt: bytes) -> str:
    digest = hmac.new(salt, name.lower().encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def plain_type(algorithm: str) -> str:
    """The key type of a host key algorithm (rsa-sha2-512 is an ssh-rsa key)."""
    return "ssh-rsa" if algorithm in ("rsa-sha2-256", "rsa-sha2-512") else algorithm


class Verdict(Enum):
    KNOWN = "known"
    NEW = "new"
    CHANGED = "changed"
    REVOKED = "revoked"
    CA_ONLY = "ca-only"  # only a @cert-authority line names the host: certificates unsupported


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    entry: Entry | None = None  # the line that decided (the known or the changed one)
    other_types: tuple[str, ...] = ()  # key types known for the host (for a new key)


def for_host(entries: Sequence[Entry], name: str) -> tuple[Entry, ...]:
    return tuple(e for e in entries if host_matches(e.hosts, name))


def check(
    entries: Sequence[Entry], name: str, blob: bytes, plain_name: str | None = None
) -> Decision:
    """OpenSSH's check_host_key for one plain (non-certificate) host key.

    ``plain_name``: for a port other than 22 without HostKeyAlias, the port-less name
    OpenSSH tries when ``[host]:port`` knows no key at all (a key found there is
    accepted; anything else leaves the verdict at "new").
    """
    decision = _check_name(entries, name, blob)
    if decision.verdict is Verdict.NEW and plain_name is not None:
        fallback = _check_name(entries, plain_name, blob)
        if fallback.verdict in (Verdict.KNOWN, Verdict.REVOKED):
            # REVOKED: OpenSSH would go on to treat the key as new; we refuse (stricter).
            return fallback
    return decision


def _check_name(entries: Sequence[Entry], name: str, blob: bytes) -> Decision:
    """hostfile.c's check_hostkeys_by_key_or_type: any other key for the host is a change."""
    mine = for_host(entries, name)
    revoked = next((e for e in mine if e.marker == "@revoked" and e.blob == blob), None)
    if revoked is not None:
        return Decision(Verdict.REVOKED, revoked)
    plain = [e for e in mine if e.marker is None]
    for entry in plain:
        if entry.blob == blob:
            return Decision(Verdict.KNOWN, entry)
    if plain:
        # OpenSSH orders the host key algorithms so that a known type is negotiated
        # first; a key of another type then still means the host's key changed.
        return Decision(Verdict.CHANGED, plain[-1], tuple(dict.fromkeys(e.key_type for e in plain)))
    if any(e.marker == "@cert-authority" for e in mine):
        ca = next(e for e in mine if e.marker == "@cert-authority")
        return Decision(Verdict.CA_ONLY, ca)
    return Decision(Verdict.NEW)


def preferred_algorithms(
    entries: Sequence[Entry], name: str, algorithms: Sequence[str]
) -> list[str]:
    """OpenSSH's order_hostkeyalgs: the algorithms of keys known for the host first."""
    known = {e.key_type for e in for_host(entries, name) if e.marker is None}
    first = [a for a in algorithms if plain_type(a) in known]
    return first + [a for a in algorithms if a not in first]
