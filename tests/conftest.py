from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent


def fixture_index() -> dict[str, dict[str, Any]]:
    """fixture path -> {command, exit_status}, from tests/fixtures/index.yaml."""
    return yaml.safe_load((FIXTURES / "index.yaml").read_text())


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.fixture(autouse=True)
def run_journals_in_tmp(tmp_path, monkeypatch) -> Path:
    """Run journals go to the test's folder, not to the user's ~/.local/state."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return state / "runbook-runner" / "runs"


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run with the repository as the working folder, as a user would."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("RUNBOOK_PATH", raising=False)
    return REPO


@pytest.fixture(scope="session")
def sshd_host():
    """A real sshd on 127.0.0.1 fronting a simulated 8-GPU server (one per xdist worker)."""
    from sshd import start_test_host

    host = start_test_host()
    yield host
    host.stop()


@pytest.fixture
def gpu_host(sshd_host):
    """The test host, reset to an idle 8-GPU server with no calls recorded."""
    from sshd import end_sim_server

    from runbook_runner.simhost.model import eight_gpu_server

    for process in sshd_host.state().processes:
        end_sim_server(process)
    sshd_host.set_state(eight_gpu_server())
    sshd_host.clear_calls()
    return sshd_host


@pytest.fixture
def connect(gpu_host):
    """Open an SshTransport to the test host; closed after the test."""
    from runbook_runner.transport import SshTransport, resolve_target

    opened = []

    def open_transport(**overrides):
        options = {
            "port": gpu_host.port,
            "user": gpu_host.user,
            "identity_files": [str(gpu_host.client_key)],
            "known_hosts": gpu_host.known_hosts,
            "connect_timeout": 5.0,
        }
        options.update(overrides)
        transport = SshTransport(resolve_target("127.0.0.1", **options)).connect()
        opened.append(transport)
        return transport

    yield open_transport
    for transport in opened:
        transport.close()
