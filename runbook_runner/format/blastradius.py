"""Warnings for destructive steps whose action reaches wider than the 'affects' they declare
(the action is read from the command once, at load: format/actions.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runbook_runner.format.actions import REACH, Action
from runbook_runner.format.ladders import step_specs
from runbook_runner.format.names import mapping
from runbook_runner.format.yamlsource import Problem, Source


def blast_radius_warnings(source: Source, actions: Sequence[Action]) -> list[Problem]:
    """Destructive steps whose action (``actions``: each step's, in the file's order) reaches
    wider than the 'affects' they declare."""
    found = []
    for entry, action in zip(step_specs(source.data), actions, strict=True):
        spec, path = entry.spec, entry.path
        declared = spec.get("affects")
        if spec.get("destructive") is not True or declared not in REACH:
            continue
        if declared != "node" and _acts_on_node_wide_holders(source.data, spec):
            found.append(
                Problem(
                    source.mark_of(entry.at("for_each_failing")),
                    entry.at("for_each_failing"),
                    f"warning: its items include the holders of /dev/nvidiactl and "
                    f"/dev/nvidia-uvm (every CUDA process of the node), wider than "
                    f"'affects: {declared}': scope the check with 'within' or "
                    "\"where: not node_wide\", or declare 'affects: node'",
                )
            )
        elif REACH.index(action.needs) > REACH.index(declared):
            found.append(
                Problem(
                    source.mark_of((*path, "run")),
                    (*path, "run"),
                    f"warning: the command reaches wider than 'affects: {declared}' "
                    f"({action.why or action.kind}): declare 'affects: {action.needs}' or "
                    "narrow the command",
                )
            )
    return found


def _acts_on_node_wide_holders(data: dict[str, Any], step: dict[str, Any]) -> bool:
    """A step per item of a device-holders check that neither scopes nor filters node-wide files."""
    check = mapping(data.get("checks")).get(str(step.get("for_each_failing")))
    if not isinstance(check, dict) or "within" in check:
        return False
    over = str(check.get("every", check.get("none")))
    observation = mapping(data.get("observations")).get(over)
    if not isinstance(observation, dict) or observation.get("parser") != "device-holders":
        return False
    where = check.get("where")
    return not (isinstance(where, str) and "node_wide" in where)
