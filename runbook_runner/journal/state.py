"""Observed state as plain JSON, for the journal and ``--json``: pure, no I/O.

Two views of one state:

- :func:`state_json`, the summary ``--json`` has always printed (gpus, gpu_processes,
  memory, unavailable, and the classified holders of a runbook with a subject);
- :func:`observations_json`, every observation's typed state whatever its parser, each
  record's fields by name (an open record's fields from the host's output too), for the
  journal: what a postmortem or a later tool reads back.

Host text stays text: JSON escapes its control characters (``\\u001b``), and a secret
parameter's value is replaced before it is written (``redact``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from runbook_runner.observe.state import Memory, Unavailable
from runbook_runner.runbook import Runbook


def first_of(runbook: Runbook, state: Mapping[str, Any], parser: str) -> Any:
    """The state of the runbook's first observation with this parser (``gpus``: also
    ``gpus-detail``); None when there is none."""
    parsers = {"gpus", "gpus-detail"} if parser == "gpus" else {parser}
    for name, observation in runbook.observations.items():
        if observation.parser in parsers and name in state:
            return state[name]
    return None


def _same(text: str) -> str:
    return text


def plain(value: Any, redact: Callable[[str], str] = _same) -> Any:
    """Any parsed value as JSON data: a record as an object of its fields (an open record's
    host-named fields after its declared ones), tuples as lists, enums as their words."""
    if isinstance(value, Enum):
        return plain(value.value, redact)
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        document: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("hidden"):
                for key, extra in getattr(value, f.name):
                    document.setdefault(str(key), plain(extra, redact))
            else:
                document[f.name] = plain(getattr(value, f.name), redact)
        return document
    if isinstance(value, tuple | list | frozenset | set):
        return [plain(item, redact) for item in value]
    if isinstance(value, Mapping):
        return {str(key): plain(item, redact) for key, item in value.items()}
    return redact(str(value))


def observations_json(
    runbook: Runbook, state: Mapping[str, Any], redact: Callable[[str], str] = _same
) -> dict[str, Any]:
    """Each observation in the state: ``{"parser": P, "value": ...}`` (a list of records for
    a parser that yields items, else one record), or ``{"parser": P, "condition": C,
    "reason": R}`` for one that could not be made."""
    document: dict[str, Any] = {}
    for name, value in state.items():
        observation = runbook.observations.get(name)
        parser = observation.parser if observation is not None else None
        if isinstance(value, Unavailable):
            document[name] = {
                "parser": parser,
                "condition": value.condition,
                "reason": redact(value.reason),
            }
        else:
            document[name] = {"parser": parser, "value": plain(value, redact)}
    return document


def state_json(runbook: Runbook, state: Mapping[str, Any]) -> dict[str, Any]:
    """The ``state`` object of --json: gpus, gpu_processes, memory; null where unknown."""
    gpus = first_of(runbook, state, "gpus")
    processes = first_of(runbook, state, "gpu-processes")
    memory = first_of(runbook, state, "free")
    return {
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "memory_used_mib": g.memory_used_mib,
                "memory_total_mib": g.memory_total_mib,
            }
            for g in gpus
        ]
        if isinstance(gpus, tuple)
        else None,
        "gpu_processes": [
            {"pid": p.pid, "process_name": p.process_name, "used_memory_mib": p.used_memory_mib}
            for p in processes
        ]
        if isinstance(processes, tuple)
        else None,
        "memory": {
            "total_bytes": memory.total_bytes,
            "used_bytes": memory.used_bytes,
            "free_bytes": memory.free_bytes,
            "available_bytes": memory.available_bytes,
        }
        if isinstance(memory, Memory)
        else None,
        "unavailable": {
            name: value.reason for name, value in state.items() if isinstance(value, Unavailable)
        },
        **_holders_json(runbook, state),
    }


def _holders_json(runbook: Runbook, state: Mapping[str, Any]) -> dict[str, Any]:
    """``holders``: each classified process once, with its GPUs, owner class, evidence and
    verdict (only for a runbook with a subject)."""
    owners = first_of(runbook, state, "process-owners")
    if runbook.subject is None or not isinstance(owners, tuple):
        return {}
    by_pid: dict[int, dict[str, Any]] = {}
    for row in owners:
        entry = by_pid.setdefault(
            row.pid,
            {
                "pid": row.pid,
                "ppid": row.ppid,
                "user": row.user,
                "state": row.stat,
                "command": row.command,
                "cgroup": row.cgroup,
                "owner": row.owner,
                "evidence": row.evidence,
                "instance": row.instance,
                "health": row.health,
                "verdict": row.disposition,
                "reason": row.reason,
                "gpus": [],
            },
        )
        if row.minor_number is not None:
            entry["gpus"].append(row.minor_number)
    return {"holders": list(by_pid.values())}
