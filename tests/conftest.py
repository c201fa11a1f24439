from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent
# Each test's outcome, for the site: an action item is done when its test passes.
pytest_plugins = ["results_file"]


def fixture_index() -> dict[str, dict[str, Any]]:
    """fixture path -> {command, exit_status}, from tests/fixtures/index.yaml."""
    return yaml.safe_load((FIXTURES / "index.yaml").read_text())


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


@cache
def journal_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((REPO / "runbook_runner" / "schema" / "journal.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def journal_problems(path: Path) -> list[str]:
    """Each line of a journal that does not match the journal schema (a line that is not
    whole JSON is a damaged journal's, which the reader reports: not checked here)."""
    problems = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        for error in journal_validator().iter_errors(event):
            problems.append(f"{path.name}:{number}: {error.json_path}: {error.message[:300]}")
    return problems


@pytest.fixture(autouse=True)
def run_journals_in_tmp(tmp_path, monkeypatch, request) -> Iterator[Path]:
    """Run journals go to the test's folder, not to the user's ~/.local/state; after the
    test, every journal written there must match the journal schema (a test that writes
    a journal by hand to show the reader's handling of a bad one says so with
    ``@pytest.mark.hand_written_journal``)."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs = state / "runbook-runner" / "runs"
    yield runs
    if request.node.get_closest_marker("hand_written_journal") or not runs.is_dir():
        return
    problems = [
        problem for path in sorted(runs.rglob("*.jsonl")) for problem in journal_problems(path)
    ]
    assert not problems, "journal lines that do not match the journal schema:\n" + "\n".join(
        problems[:20]
    )


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
            "connect_timeout": 30.0,  # a loaded machine's handshake can take seconds
        }
        options.update(overrides)
        transport = SshTransport(resolve_target("127.0.0.1", **options)).connect()
        opened.append(transport)
        return transport

    yield open_transport
    for transport in opened:
        transport.close()


@pytest.fixture
def crashed(gpu_host):
    """The incident after the server was killed: GPUs 0 and 2 still hold memory."""
    from test_run_ssh import crash
    from test_runbooks_ssh import settle

    crash(gpu_host)
    gpu_host.ssh("pkill -KILL -f sglang")
    settle(gpu_host)
    gpu_host.clear_calls()
    return gpu_host
