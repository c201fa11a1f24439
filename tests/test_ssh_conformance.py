"""Conformance with OpenSSH: the same configs and known_hosts files, our answer against ssh's.

OpenSSH is the oracle, asked in the same run: ``ssh -G`` for the resolved target,
and a real ``ssh -o BatchMode=yes ... true`` to the test sshd for accept/refuse.
Nothing here is a stored expectation of what OpenSSH does. A case where we differ
on purpose names our refusal (``refusal=``) and is documented in the README.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from sshd import keygen, start_test_host

from runbook_runner.errors import SshSetupError, TransportError
from runbook_runner.ssh.config import SshTarget, parse_ssh_g, resolve_target
from runbook_runner.transport import SshTransport

pytestmark = [
    pytest.mark.ssh,
    pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client"),
]

RELAY = Path(__file__).parent / "tcp_relay.py"


@dataclass
class Lab:
    dir: Path
    port: int
    jport: int
    user: str
    key: Path
    stranger: Path
    kh: Path
    agent_sock: Path
    host_line: str  # "ssh-ed25519 AAAA..." of the target sshd
    jump_line: str

    def values(self, case_dir: Path) -> dict[str, str]:
        return {
            "port": str(self.port),
            "jport": str(self.jport),
            "user": self.user,
            "key": str(self.key),
            "stranger": str(self.stranger),
            "kh": str(self.kh),
            "case_kh": str(case_dir / "known_hosts"),
            "dir": str(case_dir),
            "lab": str(self.dir),
            "agent": str(self.agent_sock),
            "hostkey": self.host_line,
            "jumpkey": self.jump_line,
            "relay": f"{sys.executable} {RELAY}",
            "other_key": _other_key(self.dir),
        }


def _other_key(folder: Path) -> str:
    public = folder / "other_host.pub"
    if not public.exists():
        keygen(folder / "other_host", "someone-else")
    return " ".join(public.read_text().split()[:2])


@pytest.fixture(scope="module")
def lab(sshd_host, tmp_path_factory):
    jump = start_test_host()
    folder = tmp_path_factory.mktemp("ssh-lab")
    agent = None
    try:
        authorized = jump.root / "authorized_keys"
        authorized.write_text(
            authorized.read_text() + (sshd_host.root / "authorized_keys").read_text()
        )
        key = folder / "id_good"
        shutil.copy(sshd_host.client_key, key)
        key.chmod(0o600)
        shutil.copy(f"{sshd_host.client_key}.pub", f"{key}.pub")
        keygen(folder / "id_stranger", "stranger")
        # Tokens: copies of the good key under names that %r and %h expand to.
        shutil.copy(key, folder / "id_open")
        (folder / "id_open").chmod(0o644)  # ssh ignores a private key others can read
        for name in (f"key-{sshd_host.user}", "key-127.0.0.1"):
            shutil.copy(key, folder / name)
            (folder / name).chmod(0o600)
        host_line = " ".join(sshd_host.host_public_key.split()[:2])
        jump_line = " ".join(jump.host_public_key.split()[:2])
        kh = folder / "known_hosts"
        kh.write_text(
            f"[127.0.0.1]:{sshd_host.port} {host_line}\n[127.0.0.1]:{jump.port} {jump_line}\n"
        )
        sock = folder / "agent.sock"
        agent = subprocess.Popen(
            ["ssh-agent", "-D", "-a", str(sock)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        from sshd import wait_for

        def added() -> bool:  # the socket may exist a moment before the agent answers
            return (
                subprocess.run(
                    ["ssh-add", str(key)],
                    env={**os.environ, "SSH_AUTH_SOCK": str(sock)},
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            )

        wait_for(added, 60, "ssh-agent to take the key")
        yield Lab(
            folder,
            sshd_host.port,
            jump.port,
            sshd_host.user,
            key,
            folder / "id_stranger",
            kh,
            sock,
            host_line,
            jump_line,
        )
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(timeout=10)
        jump.stop()


@dataclass(frozen=True)
class Case:
    id: str
    config: str
    host: str = "gpu"
    user: str | None = None
    port: str | None = None  # a template: "{port}"
    identity: str | None = None  # -i, a template
    agent: bool = False  # SSH_AUTH_SOCK points at the lab's agent (with the good key)
    known_hosts: str | None = None  # this case's own known_hosts ({case_kh}), a template
    refusal: str | None = None  # we refuse on purpose, with this in the message
    options: tuple[str, ...] = ()  # -o KEY=VALUE, templates
    jump: str | None = None  # -J, a template


# Every config ends with this block, so first-match-wins leaves the case's own lines first.
TAIL = "Host *\n  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n"
GPU = "Host gpu\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n"
JUMP = "Host j1 j2\n  HostName 127.0.0.1\n  Port {jport}\n  User {user}\n  IdentityFile {key}\n"

CONFIGS = [
    Case("plain", GPU),
    Case("port-comment", GPU.replace("Port {port}", "Port {port} # the inference box")),
    Case(
        "equals-sign",
        "Host gpu\n  HostName=127.0.0.1\n  Port={port}\n  User {user}\n  IdentityFile {key}\n",
    ),
    Case("wildcard-host", GPU.replace("Host gpu", "Host gpu-*"), host="gpu-07"),
    Case(
        "negated-pattern",
        "Host *.lab !bad.lab\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n",
        host="ok.lab",
    ),
    Case(
        "negated-pattern-excludes",
        "Host *.lab !bad.lab\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n",
        host="bad.lab",
    ),
    Case("first-match-wins", GPU + "Host gpu\n  Port 1\n  User nobody\n"),
    Case("include", "Include {dir}/included.conf\n"),
    Case(
        "match-host",
        "Match host 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n",
        host="127.0.0.1",
    ),
    Case(
        "match-originalhost",
        "Match originalhost gpu\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n",
    ),
    Case(
        "match-exec",
        "Match exec true\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n",
    ),
    Case(
        "token-r",
        "Host gpu\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {lab}/key-%r\n",
    ),
    Case(
        "token-h",
        "Host gpu\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {lab}/key-%h\n",
    ),
    Case(
        "missing-identity-skipped",
        GPU.replace("  IdentityFile {key}\n", "  IdentityFile {dir}/nope\n  IdentityFile {key}\n"),
    ),
    Case("only-missing-identity", GPU.replace("{key}", "{dir}/nope")),
    Case("wrong-key", GPU.replace("{key}", "{stranger}")),
    Case("too-open-key-ignored", GPU.replace("{key}", "{lab}/id_open")),
    Case(
        "wrong-then-right-key",
        GPU.replace("  IdentityFile {key}\n", "  IdentityFile {stranger}\n  IdentityFile {key}\n"),
    ),
    Case("agent-key", GPU.replace("  IdentityFile {key}\n", ""), agent=True),
    Case(
        "identities-only-blocks-agent",
        GPU.replace("{key}", "{stranger}") + "  IdentitiesOnly yes\n",
        agent=True,
    ),
    Case("identities-only-agent-holds-file-key", GPU + "  IdentitiesOnly yes\n", agent=True),
    Case(
        "identity-file-pub-names-agent-key",
        GPU.replace("{key}", "{key}.pub") + "  IdentitiesOnly yes\n",
        agent=True,
    ),
    Case("identity-file-pub-without-agent", GPU.replace("{key}", "{key}.pub")),
    Case("public-key-on-command-line-agent-holds-it", GPU, identity="{key}.pub", agent=True),
    Case(
        "identity-agent-none",
        GPU.replace("  IdentityFile {key}\n", "  IdentityAgent none\n"),
        agent=True,
    ),
    Case("identity-agent-path", GPU.replace("  IdentityFile {key}\n", "  IdentityAgent {agent}\n")),
    Case("canonicalize-without-domains", "CanonicalizeHostname yes\n" + GPU),
    Case(
        "connect-timeout",
        GPU + "  ConnectTimeout 7\n  ServerAliveInterval 5\n  ServerAliveCountMax 2\n",
    ),
    Case("proxyjump-alias", GPU + "  ProxyJump j1\n" + JUMP),
    # ssh's own -o, -J on the command line (issue 28), through the same ssh -G
    Case(
        "dash-o-port-and-user",
        GPU.replace("  Port {port}\n", "").replace("  User {user}\n", ""),
        options=("Port={port}", "User={user}"),
    ),
    Case(
        "dash-o-wins-over-the-config",
        GPU.replace("Port {port}", "Port 1"),
        options=("Port {port}",),
    ),
    Case("dash-o-first-wins", GPU, options=("Port={port}", "Port=1")),
    Case(
        "dash-o-identity-file",
        GPU.replace("  IdentityFile {key}\n", ""),
        options=("IdentityFile={key}",),
    ),
    Case("dash-o-proxyjump", GPU + JUMP, options=("ProxyJump=j1",)),
    Case("dash-j-alias", GPU + JUMP, jump="j1"),
    Case("dash-j-chain", GPU + JUMP, jump="j1,j2"),
    Case(
        "dash-j-user-host-port",
        GPU + "Host 127.0.0.1\n  IdentityFile {key}\n",
        jump="{user}@127.0.0.1:{jport}",
    ),
    Case("dash-j-overrides-proxyjump", GPU + "  ProxyJump nowhere.invalid\n" + JUMP, jump="j1"),
    Case("proxyjump-chain-of-aliases", GPU + "  ProxyJump j1,j2\n" + JUMP),
    Case(
        "proxyjump-user-host-port",
        GPU + "  ProxyJump {user}@127.0.0.1:{jport}\nHost 127.0.0.1\n  IdentityFile {key}\n",
    ),
    Case("jump-host-own-proxyjump", GPU + "  ProxyJump j2\nHost j2\n  ProxyJump j1\n" + JUMP),
    Case(
        "jump-host-own-wrong-key",
        GPU + "  ProxyJump j1\nHost j1\n  IdentityFile {stranger}\n  IdentitiesOnly yes\n" + JUMP,
    ),
    Case(
        "proxyjump-none-overrides", GPU + "  ProxyJump none\nHost *\n  ProxyJump nowhere.invalid\n"
    ),
    Case("proxycommand-relay", GPU + "  ProxyCommand {relay} %h %p\n"),
    Case("proxycommand-ssh-w", GPU + "  ProxyCommand ssh -F {dir}/config -W %h:%p j1\n" + JUMP),
    Case("proxycommand-fails", GPU + "  ProxyCommand false\n"),
    Case("proxyjump-before-proxycommand", GPU + "  ProxyJump j1\n  ProxyCommand false\n" + JUMP),
    Case("proxycommand-before-proxyjump", GPU + "  ProxyCommand false\n  ProxyJump j1\n" + JUMP),
    Case("known-hosts-several-files", GPU + "  UserKnownHostsFile {dir}/unrelated {kh}\n"),
    Case("known-hosts-empty-file", GPU + "  UserKnownHostsFile /dev/null\n"),
    Case(
        "global-known-hosts", GPU + "  UserKnownHostsFile /dev/null\n  GlobalKnownHostsFile {kh}\n"
    ),
    Case(
        "host-key-alias",
        GPU + "  HostKeyAlias gpu-box\n  UserKnownHostsFile {case_kh}\n",
        known_hosts="Gpu-Box {hostkey}\n",
    ),
    Case("host-key-alias-unknown", GPU + "  HostKeyAlias gpu-box\n"),
    Case(
        "strict-no-unknown-host",
        GPU + "  StrictHostKeyChecking no\n  UserKnownHostsFile {case_kh}\n",
        known_hosts="",
        refusal="unknown host key",
    ),
    Case(
        "strict-accept-new",
        GPU + "  StrictHostKeyChecking accept-new\n  UserKnownHostsFile {case_kh}\n",
        known_hosts="",
    ),
    Case("user-override", GPU.replace("User {user}", "User nobody"), user="{user}"),
    Case("port-override", GPU.replace("Port {port}", "Port 1"), port="{port}"),
    Case("user-at-host", GPU.replace("  User {user}\n", ""), host="{user}@gpu"),
    Case(
        "no-hostname-literal-address",
        "Host 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n",
        host="127.0.0.1",
    ),
    Case("certificate-file", GPU + "  CertificateFile {dir}/cert.pub\n", refusal="CertificateFile"),
    Case("kex-restricted", GPU + "  KexAlgorithms curve25519-sha256\n"),
    Case("kex-appended", GPU + "  KexAlgorithms +diffie-hellman-group14-sha256\n"),
    Case(
        "ciphers-only-chacha", GPU + "  Ciphers chacha20-poly1305@openssh.com\n", refusal="Ciphers"
    ),
    Case("hostkeyalgorithms-rsa-only", GPU + "  HostKeyAlgorithms rsa-sha2-512\n"),
    Case("address-family-inet", GPU + "  AddressFamily inet\n"),
    Case(
        "ignored-harmless-options",
        GPU + "  GSSAPIAuthentication yes\n  SendEnv LANG\n  ForwardAgent no\n  Compression yes\n",
    ),
    Case("identity-on-command-line", GPU.replace("  IdentityFile {key}\n", ""), identity="{key}"),
    Case("missing-identity-on-command-line", GPU, identity="{dir}/nope", refusal="no such file"),
    Case("public-key-on-command-line", GPU, identity="{key}.pub", refusal="a public key"),
    Case("directory-on-command-line", GPU, identity="{dir}", refusal="a directory"),
]

HOSTLINE = "[127.0.0.1]:{port} {hostkey}\n"
KNOWN_HOSTS = [
    Case("kh-exact", "", known_hosts=HOSTLINE),
    Case("kh-hashed", "", known_hosts="HASHED"),
    Case("kh-portless-entry-for-non-22-port", "", known_hosts="127.0.0.1 {hostkey}\n"),
    Case("kh-portless-other-key", "", known_hosts="127.0.0.1 {other_key}\n"),
    Case(
        "kh-bracketed-other-key-wins-over-portless",
        "",
        known_hosts="[127.0.0.1]:{port} {other_key}\n127.0.0.1 {hostkey}\n",
    ),
    Case(
        "kh-portless-other-key-accept-new",
        "Host gpu\n  StrictHostKeyChecking accept-new\n",
        known_hosts="127.0.0.1 {other_key}\n",
    ),
    Case("kh-wildcard-bracketed", "", known_hosts="[127.0.0.*]:{port} {hostkey}\n"),
    Case("kh-star", "", known_hosts="* {hostkey}\n"),
    Case("kh-question-mark", "", known_hosts="[127.0.0.?]:{port} {hostkey}\n"),
    Case("kh-comma-list", "", known_hosts="other.example,[127.0.0.1]:{port} {hostkey}\n"),
    Case("kh-negation", "", known_hosts="[127.0.0.*]:{port},![127.0.0.1]:{port} {hostkey}\n"),
    Case(
        "kh-stale-line-before-match", "", known_hosts="[127.0.0.1]:{port} {other_key}\n" + HOSTLINE
    ),
    Case("kh-changed", "", known_hosts="[127.0.0.1]:{port} {other_key}\n"),
    Case("kh-other-type-only", "", known_hosts="[127.0.0.1]:{port} RSA\n"),
    Case("kh-several-types", "", known_hosts="[127.0.0.1]:{port} RSA\n" + HOSTLINE),
    Case("kh-revoked", "", known_hosts="@revoked [127.0.0.1]:{port} {hostkey}\n" + HOSTLINE),
    Case("kh-revoked-star", "", known_hosts="@revoked * {hostkey}\n" + HOSTLINE),
    Case("kh-revoked-other-key", "", known_hosts="@revoked * {other_key}\n" + HOSTLINE),
    Case(
        "kh-revoked-with-accept-new",
        "Host gpu\n  StrictHostKeyChecking accept-new\n",
        known_hosts="@revoked * {hostkey}\n",
    ),
    Case(
        "kh-cert-authority-only",
        "",
        known_hosts="@cert-authority [127.0.0.1]:{port} {other_key}\n",
    ),
    Case(
        "kh-cert-authority-with-accept-new",
        "Host gpu\n  StrictHostKeyChecking accept-new\n",
        known_hosts="@cert-authority * {other_key}\n",
        refusal="host certificates are not supported",
    ),
    Case("kh-cert-authority-and-key", "", known_hosts="@cert-authority * {other_key}\n" + HOSTLINE),
    Case(
        "kh-damaged-base64",
        "",
        known_hosts="[127.0.0.1]:{port} ssh-ed25519 AAAA!!notbase64\n" + HOSTLINE,
    ),
    Case("kh-damaged-short-line", "", known_hosts="[127.0.0.1]:{port} ssh-ed25519\n" + HOSTLINE),
    Case(
        "kh-type-mismatch", "", known_hosts="[127.0.0.1]:{port} ssh-rsa {hostkeyblob}\n" + HOSTLINE
    ),
    Case("kh-unknown-marker", "", known_hosts="@bogus [127.0.0.1]:{port} {hostkey}\n" + HOSTLINE),
    Case("kh-comments-and-blanks", "", known_hosts="# pinned by ops\n\n   \n" + HOSTLINE),
    Case(
        "kh-upper-case-alias",
        "Host gpu\n  HostKeyAlias GPU-BOX\n",
        known_hosts="gpu-box {hostkey}\n",
    ),
    Case("kh-hashed-wrong-port", "", known_hosts="HASHED-WRONG-PORT"),
    Case("kh-empty-accept-new", "Host gpu\n  StrictHostKeyChecking accept-new\n", known_hosts=""),
]
for index, case in enumerate(KNOWN_HOSTS):
    # The known_hosts cases connect to the plain target with the case's own file.
    KNOWN_HOSTS[index] = Case(
        case.id,
        case.config + GPU + "  UserKnownHostsFile {case_kh}\n",
        known_hosts=case.known_hosts,
        refusal=case.refusal,
    )


def _known_hosts_text(template: str, values: dict[str, str], lab: Lab, folder: Path) -> str:
    if template.startswith("HASHED"):
        port = lab.port if template == "HASHED" else lab.port + 1
        plain = folder / "plain_known_hosts"
        plain.write_text(f"[127.0.0.1]:{port} {lab.host_line}\n")
        subprocess.run(["ssh-keygen", "-H", "-f", str(plain)], check=True, capture_output=True)
        return plain.read_text()
    rsa = folder / "rsa_host"
    if "RSA" in template and not rsa.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)], check=True
        )
    text = template.replace(
        "RSA", " ".join(Path(f"{rsa}.pub").read_text().split()[:2]) if rsa.exists() else "RSA"
    )
    values = {**values, "hostkeyblob": lab.host_line.split()[1]}
    return text.format(**values)


def _prepare(case: Case, lab: Lab, folder: Path) -> tuple[Path, dict[str, str]]:
    values = lab.values(folder)
    (folder / "included.conf").write_text(GPU.format(**values))
    (folder / "unrelated").write_text(f"[127.0.0.1]:1 {lab.host_line}\n")
    (folder / "cert.pub").write_text("")
    if case.known_hosts is not None:
        (folder / "known_hosts").write_text(
            _known_hosts_text(case.known_hosts, values, lab, folder)
        )
    config = folder / "config"
    config.write_text((case.config + TAIL).format(**values))
    return config, values


@dataclass
class Outcome:
    ok: bool
    message: str
    target: SshTarget | None = None


def _ours(case: Case, config: Path, values: dict[str, str]) -> Outcome:
    try:
        target = resolve_target(
            case.host.format(**values),
            user=case.user.format(**values) if case.user else None,
            port=int(case.port.format(**values)) if case.port else None,
            identity_files=[case.identity.format(**values)] if case.identity else None,
            ssh_config=config,
            options=[o.format(**values) for o in case.options],
            jump=case.jump.format(**values) if case.jump else None,
        )
    except SshSetupError as error:
        return Outcome(False, str(error))
    try:
        with SshTransport(target).connect():
            return Outcome(True, "", target)
    except TransportError as error:
        return Outcome(False, str(error), target)


def _openssh(case: Case, config: Path, values: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-v", "-F", str(config), "-o", "BatchMode=yes"]
    if case.user:
        argv += ["-l", case.user.format(**values)]
    if case.port:
        argv += ["-p", case.port.format(**values)]
    if case.identity:
        argv += ["-i", case.identity.format(**values)]
    argv += [*_o_and_j(case, values), case.host.format(**values), "true"]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False
    )


def _ssh_g(case: Case, config: Path, values: dict[str, str]) -> dict[str, list[str]]:
    argv = ["ssh", "-G", "-F", str(config)]
    if case.user:
        argv += ["-l", case.user.format(**values)]
    if case.port:
        argv += ["-p", case.port.format(**values)]
    argv += [*_o_and_j(case, values), case.host.format(**values)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return parse_ssh_g(done.stdout) if done.returncode == 0 else {}


def _o_and_j(case: Case, values: dict[str, str]) -> list[str]:
    argv = [word for option in case.options for word in ("-o", option.format(**values))]
    return argv + (["-J", case.jump.format(**values)] if case.jump else [])


@pytest.fixture
def environment(monkeypatch):
    def set_agent(case: Case, lab: Lab) -> None:
        if case.agent:
            monkeypatch.setenv("SSH_AUTH_SOCK", str(lab.agent_sock))
        else:
            monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)

    return set_agent


def _compare(case: Case, lab: Lab, folder: Path, set_agent) -> None:
    set_agent(case, lab)
    config, values = _prepare(case, lab, folder)
    # ssh gets its own known_hosts copy (accept-new writes to it), so both run at once.
    theirs = {**values, "case_kh": str(folder / "known_hosts.ssh")}
    if case.known_hosts is not None:
        shutil.copy(folder / "known_hosts", folder / "known_hosts.ssh")
    ssh_config = folder / "config.ssh"
    ssh_config.write_text((case.config + TAIL).format(**theirs))
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(_openssh, case, ssh_config, theirs)
        ours = _ours(case, config, values)
        openssh = running.result()
    if "Traceback" in ours.message:
        pytest.fail(f"a traceback in our message: {ours.message}")
    if case.refusal is not None:
        assert not ours.ok, f"{case.id}: we should refuse on purpose ({case.refusal})"
        assert case.refusal in ours.message, ours.message
        return
    assert ours.ok == (openssh.returncode == 0), (
        f"{case.id}: runbook {'connected' if ours.ok else 'refused: ' + ours.message}; "
        f"OpenSSH exit {openssh.returncode}: {openssh.stderr[-1500:]}"
    )
    if ours.target is None:
        return
    effective = _ssh_g(case, config, values)
    if effective:
        target = ours.target
        assert target.hostname == effective["hostname"][0]
        assert str(target.port) == effective["port"][0]
        assert target.user == effective["user"][0]
    # The identity files ssh loaded (ssh -v), tokens expanded, in the same order.
    loaded = [
        path
        for path in re.findall(r"debug1: identity file (\S+) type", openssh.stderr)
        if not path.endswith("-cert")  # ssh also looks for a certificate beside each key
    ]
    # The jump hosts' ssh processes may print theirs too: the target's come last.
    expected = list(ours.target.identity_files)
    if ours.ok:
        assert loaded[-len(expected) :] == expected
        # The same route: ssh (and, with -v passed on, each jump ssh) logs one login per hop.
        assert len(ours.target.route) == openssh.stderr.count("Authenticated to ")


@pytest.mark.parametrize("case", CONFIGS, ids=[c.id for c in CONFIGS])
def test_config_matches_openssh(case, lab, tmp_path, environment):
    _compare(case, lab, tmp_path, environment)


@pytest.mark.parametrize("case", KNOWN_HOSTS, ids=[c.id for c in KNOWN_HOSTS])
def test_known_hosts_matches_openssh(case, lab, tmp_path, environment):
    _compare(case, lab, tmp_path, environment)


@pytest.mark.parametrize("case", CONFIGS, ids=[c.id for c in CONFIGS])
def test_fallback_without_openssh_matches_ssh_g_or_refuses(case, lab, tmp_path, monkeypatch):
    """paramiko's parser (no OpenSSH client) resolves the same target as ssh -G, or refuses."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    config, values = _prepare(case, lab, tmp_path)
    host = case.host.format(**values)
    options = {
        "user": case.user.format(**values) if case.user else None,
        "port": int(case.port.format(**values)) if case.port else None,
        "ssh_config": config,
        "options": [o.format(**values) for o in case.options],
        "jump": case.jump.format(**values) if case.jump else None,
    }
    try:
        with_openssh = resolve_target(host, **options)
    except SshSetupError:
        with pytest.raises(SshSetupError):
            resolve_target(host, ssh=None, **options)
        return
    refusal = None
    try:
        fallback = resolve_target(host, ssh=None, **options)
    except SshSetupError as error:
        refusal = str(error)
    if refusal is not None:  # a refusal names what the fallback cannot honour
        assert any(word in refusal for word in ("needs OpenSSH", "not supported")), refusal
        return
    for ours, theirs in zip(fallback.route, with_openssh.route, strict=True):
        for name in (
            "hostname",
            "port",
            "user",
            "identity_files",
            "identities_only",
            "known_hosts_files",
            "host_key_alias",
            "strict_host_key_checking",
            "connect_timeout",
            "proxy_command",
        ):
            assert getattr(ours, name) == getattr(theirs, name), (case.id, name)


@pytest.mark.parametrize("hashed", ["yes", "no"])
def test_a_host_key_we_record_is_one_openssh_then_accepts(lab, tmp_path, monkeypatch, hashed):
    """--accept-new-host-key writes the line (hashed per HashKnownHosts) that ssh then trusts."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "config"
    config.write_text(
        GPU.format(**lab.values(tmp_path))
        + f"  UserKnownHostsFile {known}\n  GlobalKnownHostsFile /dev/null\n"
        + f"  HashKnownHosts {hashed}\n"
    )
    target = resolve_target("gpu", ssh_config=config, accept_new_host_key=True)
    with SshTransport(target).connect():
        pass
    line = known.read_text()
    assert line.startswith("|1|") == (hashed == "yes")
    done = subprocess.run(
        [
            *("ssh", "-F", str(config), "-o", "BatchMode=yes"),
            *("-o", "StrictHostKeyChecking=yes", "gpu", "true"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert known.read_text() == line
