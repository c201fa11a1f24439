"""Where runbooks are found: --runbooks DIR, $RUNBOOK_PATH, ./runbooks, or the bundled set."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from runbook_runner.errors import RunbookRunnerError
from runbook_runner.format.suggest import suggest


class UnknownRunbook(RunbookRunnerError):
    pass


def bundled_dir() -> Path:
    return Path(str(resources.files("runbook_runner").joinpath("runbooks")))


def search_path(option: str | None, environ: dict[str, str] | os._Environ[str]) -> list[Path]:
    """The folders to look in, first match wins."""
    if option:
        return [Path(option)]
    if environ.get("RUNBOOK_PATH"):
        return [Path(p) for p in environ["RUNBOOK_PATH"].split(os.pathsep) if p]
    local = Path("runbooks")
    if local.is_dir():
        return [local]
    return [bundled_dir()]


@dataclass(frozen=True)
class Catalog:
    folders: tuple[Path, ...]

    def paths(self) -> dict[str, Path]:
        """Runbook name -> file, the first folder winning on equal names."""
        found: dict[str, Path] = {}
        for folder in self.folders:
            for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
                found.setdefault(path.stem, path)
        return found

    def find(self, name_or_path: str) -> Path:
        """A runbook by name, or a path to a YAML file."""
        candidate = Path(name_or_path)
        looks_like_a_path = candidate.suffix in {".yaml", ".yml"} or "/" in name_or_path
        if looks_like_a_path and candidate.exists():
            if candidate.is_dir():
                raise UnknownRunbook(
                    f"{name_or_path}: a folder, not a runbook file (give --runbooks "
                    f"{name_or_path} and a runbook's name)"
                )
            return candidate  # a file, or a pipe (<(...)): read with a size bound
        paths = self.paths()
        if name_or_path in paths:
            return paths[name_or_path]
        if candidate.suffix in {".yaml", ".yml"} or "/" in name_or_path:
            raise UnknownRunbook(f"{name_or_path}: the file does not exist")
        where = ", ".join(str(f) for f in self.folders)
        raise UnknownRunbook(
            f"no runbook named {name_or_path!r} in {where}{suggest(name_or_path, list(paths))}"
            " (see 'runbook list', or pass --runbooks DIR)"
        )
