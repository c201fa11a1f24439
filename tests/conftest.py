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


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run with the repository as the working folder, as a user would."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("RUNBOOK_PATH", raising=False)
    return REPO
