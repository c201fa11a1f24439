"""A picture of one run: each GPU's memory and the host's available memory over the run's
time, with the actions marked where they happened (pure: journal events in, SVG text out).

Drawn from the journal's observed states (``observed`` lines: the goal ``before``, every
``poll`` between rungs and during waits, and ``after``) as a static SVG: no script, no
network, no web font. Text and axes use ``currentColor``, so the chart follows the page's
light or dark scheme; each series has its own dash pattern and marker as well as its colour,
so it still reads printed in grey. Every point carries its value (``data-value``) and a
``<title>``: the numbers in the picture are the journal's, to the unit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runbook_runner.safetext import visible
from runbook_runner.status import ConfirmAnswer

WIDTH, GPU_HEIGHT, HOST_HEIGHT = 720, 220, 120
LEFT, RIGHT, TOP, GAP, AXIS, LEGEND_ROW = 92, 16, 24, 40, 30, 16
LEGEND_ITEM, LEGEND_PER_ROW = 86, 7
# Distinct in hue and in lightness (Okabe-Ito), readable on white and on the dark theme.
COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#999999", "#F0E442"]
DASHES = ["", "6 3", "2 3", "8 3 2 3", "1 2", "10 4", "4 2 1 2", "12 3"]


@dataclass
class Series:
    name: str
    unit: str
    points: list[tuple[float, float]] = field(default_factory=list)  # (seconds, value)

    def add(self, t: float, value: float) -> None:
        """A point, unless it repeats the last one (several checks at the same moment)."""
        if not self.points or self.points[-1] != (t, value):
            self.points.append((t, value))


@dataclass(frozen=True)
class Action:
    at_s: float
    step: str
    label: str


@dataclass(frozen=True)
class RunPicture:
    gpus: tuple[Series, ...]
    host: Series | None
    actions: tuple[Action, ...]
    span_s: float


def _seconds(stamp: object) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def picture(
    events: Sequence[Mapping[str, Any]], targets: Mapping[str, str] | None = None
) -> RunPicture:
    """The series and actions of a run's journal events. ``targets``: step id -> what it
    acted on (e.g. 'GPU 0, GPU 2'), shown with the action's mark."""
    start = next((s for s in (_seconds(e.get("t")) for e in events) if s is not None), 0.0)
    gpus: dict[str, Series] = {}
    host: Series | None = None
    actions: list[Action] = []
    end = start
    for event in events:
        at = _seconds(event.get("t"))
        if at is None:
            continue
        end = max(end, at)
        t = at - start
        kind = event.get("event")
        if kind == "observed":
            state = event.get("state") or {}
            for gpu in state.get("gpus") or []:
                if not isinstance(gpu, Mapping):
                    continue
                used = gpu.get("memory_used_mib")
                if isinstance(used, int | float) and not isinstance(used, bool):
                    name = f"GPU {gpu.get('index')}"
                    gpus.setdefault(name, Series(name, "MiB")).add(t, float(used))
            memory = state.get("memory") or {}
            available = memory.get("available_bytes") if isinstance(memory, Mapping) else None
            if isinstance(available, int | float) and not isinstance(available, bool):
                host = host or Series("host available", "GiB")
                host.add(t, available / 2**30)
        elif kind == "confirmation" and str(event.get("answer", "")).startswith(ConfirmAnswer.YES):
            step = str(event.get("step", ""))
            if not any(a.step == step for a in actions):
                label = step + (f" ({targets[step]})" if targets and targets.get(step) else "")
                actions.append(Action(t, step, label))
    order = sorted(gpus.values(), key=lambda s: _index_key(s.name))
    return RunPicture(tuple(order), host, tuple(actions), end - start)


def _index_key(name: str) -> tuple[int, str]:
    match = re.search(r"(\d+)$", name)
    return (int(match.group(1)) if match else 1 << 30, name)


def _xml(text: object) -> str:
    shown = visible(" ".join(str(text).split()), lines=False, tabs=False)
    return (
        shown.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("{", "&#123;")
        .replace("}", "&#125;")
    )


def _number(value: float, unit: str) -> str:
    return f"{value:,.1f} {unit}" if unit == "GiB" else f"{value:,.0f} {unit}"


def _ticks(top: float, count: int = 4) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / count
    magnitude = 10 ** (len(str(int(raw))) - 1) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks, value = [], 0.0
    while value <= top + 1e-9:
        ticks.append(value)
        value += step
    return ticks


def svg(run: RunPicture, title: str = "The run: memory over time") -> str:
    """The picture as one SVG element on a single line per element (no blank lines, so
    Markdown passes it through as HTML)."""
    span = max(run.span_s, 1.0) * 1.04  # a margin after the last state
    plot_w = WIDTH - LEFT - RIGHT
    host_top = TOP + GPU_HEIGHT + GAP
    named = [*run.gpus, *([run.host] if run.host else [])]
    rows = -(-len(named) // LEGEND_PER_ROW)
    bottom = host_top + (HOST_HEIGHT if run.host else -GAP)
    height = bottom + AXIS + rows * LEGEND_ROW + 4

    def x(t: float) -> float:
        return LEFT + plot_w * t / span

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="rbr-run-chart" role="img" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" style="max-width:{WIDTH}px;height:auto" '
        f'font-family="sans-serif" font-size="11" fill="currentColor">',
        f"<title>{_xml(title)}</title>",
        "<desc>Each GPU's memory used (MiB) and the host's available memory (GiB) at every "
        "state the run observed; dashed vertical lines mark the actions.</desc>",
    ]

    def panel(series: Sequence[Series], top: float, panel_h: float, unit: str, label: str) -> None:
        values = [v for s in series for _, v in s.points]
        ceiling = max(values, default=0.0) * 1.05 or 1.0
        ticks = _ticks(ceiling)
        ceiling = max(ceiling, ticks[-1])

        def y(v: float) -> float:
            return top + panel_h - panel_h * v / ceiling

        out.append(f'<text x="{LEFT}" y="{top - 8:.1f}" font-weight="bold">{_xml(label)}</text>')
        for tick in ticks:
            out.append(
                f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                'stroke="currentColor" stroke-opacity="0.15"/>'
            )
            out.append(
                f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                f"{_xml(_number(tick, unit))}</text>"
            )
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT}" y1="{top}" y2="{top + panel_h}" stroke="currentColor"/>'
        )
        for number, s in enumerate(series):
            colour, dash = COLOURS[number % len(COLOURS)], DASHES[number % len(DASHES)]
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s.points)
            out.append(
                f'<g class="series" data-series="{_xml(s.name)}" data-unit="{s.unit}">'
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"'
                + (f' stroke-dasharray="{dash}"' if dash else "")
                + "/>"
            )
            for t, v in s.points:
                value = f"{v:.3f}".rstrip("0").rstrip(".") if unit == "GiB" else f"{v:.0f}"
                out.append(
                    f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}" '
                    f'data-t="{t:g}" data-value="{value}"><title>{_xml(s.name)} at +{t:g} s: '
                    f"{_xml(_number(v, unit))}</title></circle>"
                )
            out.append("</g>")

    panel(run.gpus, TOP, GPU_HEIGHT, "MiB", "GPU memory used")
    if run.host:
        panel([run.host], host_top, HOST_HEIGHT, "GiB", "Host memory available")
    out.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}" stroke="currentColor"/>'
    )
    for tick in _ticks(span, 5):
        out.append(
            f'<text x="{x(tick):.1f}" y="{bottom + 14}" text-anchor="middle">+{tick:g} s</text>'
        )
    for number, action in enumerate(run.actions):
        ax = x(action.at_s)
        right = ax > LEFT + plot_w / 2  # the label on the side with room for it
        out.append(
            f'<g class="action" data-action="{_xml(action.step)}" data-t="{action.at_s:g}">'
            f'<line x1="{ax:.1f}" x2="{ax:.1f}" y1="{TOP}" y2="{bottom}" stroke="currentColor" '
            'stroke-dasharray="4 3"/>'
            f'<text x="{ax - 4 if right else ax + 4:.1f}" y="{TOP + GPU_HEIGHT / 2 + 14 * number:.1f}"'
            + (' text-anchor="end"' if right else "")
            + f">{_xml(action.label)} (+{action.at_s:g} s)</text></g>"
        )
    # The legend: each series' colour, dash pattern and name, in rows under the time axis.
    groups = [(s, "MiB") for s in run.gpus] + ([(run.host, "GiB")] if run.host else [])
    for number, (series, _) in enumerate(groups):
        colour = COLOURS[number % len(COLOURS)] if series is not run.host else COLOURS[0]
        dash = DASHES[number % len(DASHES)] if series is not run.host else ""
        lx = LEFT + (number % LEGEND_PER_ROW) * LEGEND_ITEM
        ly = bottom + AXIS + (number // LEGEND_PER_ROW) * LEGEND_ROW
        out.append(
            f'<line x1="{lx}" x2="{lx + 20}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" '
            'stroke-width="2"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
        )
        out.append(f'<text x="{lx + 24}" y="{ly}">{_xml(series.name)}</text>')
    out.append("</svg>")
    return "\n".join(out)
