"""The steps of a runbook as the engine reads them: one flat, ordered list.

A runbook's ``steps`` lists steps and ladders. A ladder groups its rungs under a name
(``ladder: gpu``) with the defaults that fit a ladder: a rung's failure passes to the next
rung (``on_failure: continue``) unless the rung says otherwise, and ``root``,
``destructive`` or ``affects`` given once for every rung (a rung's own key wins). A step (or rung) may say when it runs in one
place, ``runs: {for_each_failing: ..., fixes: ..., skip_if: ..., when: ...}``.

:func:`step_specs` flattens that into one spec per step, in file order, each with the
path of the step in the file and where each key was written (for ``file:line:col``
errors). Pure; reads a raw document defensively (the schema reports wrong shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runbook_runner.format.yamlsource import Path

# What a step says about when it runs, in one place: ``runs: {...}``.
RUNS_KEYS = ("for_each_failing", "fixes", "skip_if", "when")
# What a ladder gives each of its rungs that does not say otherwise.
LADDER_DEFAULTS = ("root", "destructive", "on_failure", "affects")


@dataclass
class StepSpec:
    """One step as the engine reads it: ``spec`` with its ladder's defaults and its
    ``runs`` block merged in; ``path`` where the step is; ``where`` where a key was written."""

    path: Path
    spec: dict[str, Any]
    ladder: str = ""
    written: dict[str, Path] = field(default_factory=dict)
    twice: list[str] = field(default_factory=list)  # keys given in 'runs' and beside it

    def at(self, key: str, *rest: str | int) -> Path:
        return (*self.written.get(key, (*self.path, key)), *rest)


def step_specs(data: Any) -> list[StepSpec]:
    """Every step of the document, in order, flattened out of its ladders."""
    steps = data.get("steps") if isinstance(data, dict) else None
    found: list[StepSpec] = []
    for i, entry in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(entry, dict):
            continue
        if "ladder" in entry:
            rungs = entry.get("rungs")
            defaults = {"on_failure": "continue"}
            defaults.update({k: entry[k] for k in LADDER_DEFAULTS if k in entry})
            name = entry["ladder"] if isinstance(entry["ladder"], str) else ""
            for j, rung in enumerate(rungs if isinstance(rungs, list) else []):
                if isinstance(rung, dict):
                    found.append(_one(("steps", i, "rungs", j), rung, name, defaults))
        else:
            found.append(_one(("steps", i), entry, "", {}))
    return found


def _one(path: Path, spec: dict[str, Any], ladder: str, defaults: dict[str, Any]) -> StepSpec:
    merged = {**defaults, **{k: v for k, v in spec.items() if k != "runs"}}
    written = {k: (*path[:2], k) for k in defaults if k not in spec and len(path) > 2}
    twice = []
    runs = spec.get("runs")
    if isinstance(runs, dict):
        for key in RUNS_KEYS:
            if key in runs:
                if key in spec:
                    twice.append(key)
                merged[key] = runs[key]
                written[key] = (*path, "runs", key)
    return StepSpec(path, merged, ladder, written, twice)


def ladders(data: Any) -> list[tuple[str, list[str]]]:
    """Each ladder's name and its rungs' ids, in order (a step outside any ladder: '')."""
    result: list[tuple[str, list[str]]] = []
    for spec in step_specs(data):
        name, step_id = spec.ladder, str(spec.spec.get("id", ""))
        if result and result[-1][0] == name:
            result[-1][1].append(step_id)
        else:
            result.append((name, [step_id]))
    return result


def find(data: Any, step_id: str) -> StepSpec | None:
    return next((s for s in step_specs(data) if s.spec.get("id") == step_id), None)
