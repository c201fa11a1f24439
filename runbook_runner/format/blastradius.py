"""Warnings for destructive steps whose command reaches wider than the 'affects' they declare."""

from __future__ import annotations

import re
from typing import Any

from runbook_runner.format.ladders import step_specs
from runbook_runner.format.names import mapping
from runbook_runner.format.yamlsource import Problem, Source

# Commands whose reach is wider than a process: (pattern, the least 'affects' they need, why).
_WIDE_COMMANDS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"/dev/nvidia(\*|ctl|-uvm)"),
        "node",
        "/dev/nvidiactl and /dev/nvidia-uvm are held by every CUDA process of the node",
    ),
    (
        re.compile(r"\b(rmmod|modprobe|reboot|shutdown)\b"),
        "node",
        "a driver reload or a reboot reaches every GPU",
    ),
    (re.compile(r"--gpu-reset(?!.*-i)"), "node", "a reset without -i resets every GPU"),
    (re.compile(r"\b(killall|pkill)\b"), "process", ""),
    (re.compile(r"\brm\b"), "files", "it removes files"),
    (re.compile(r"\bsystemctl\s+(stop|restart|kill)\b"), "service", "it stops a service"),
    (re.compile(r"--gpu-reset"), "gpu", "it resets a GPU"),
)
_RADIUS = ("none", "process", "files", "service", "gpu", "node")


def blast_radius_warnings(source: Source) -> list[Problem]:
    """Destructive steps whose command looks wider than the 'affects' they declare."""
    found = []
    for entry in step_specs(source.data):
        spec, path = entry.spec, entry.path
        run = spec.get("run")
        if isinstance(run, list):
            run = " ".join(str(word) for word in run)
        if not isinstance(run, str):
            continue
        declared = spec.get("affects")
        if spec.get("destructive") is not True or declared not in _RADIUS:
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
            continue
        for pattern, needs, why in _WIDE_COMMANDS:
            if pattern.search(run) and _RADIUS.index(needs) > _RADIUS.index(declared):
                found.append(
                    Problem(
                        source.mark_of((*path, "run")),
                        (*path, "run"),
                        f"warning: the command reaches wider than 'affects: {declared}' "
                        f"({why}): declare 'affects: {needs}' or narrow the command",
                    )
                )
                break
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
