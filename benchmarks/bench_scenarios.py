"""Per scenario of the matrix: time to recovery (simulated) and actions taken versus the
expert's ideal, as a Markdown table (the README carries the current one).

    python3 benchmarks/bench_scenarios.py [--runbook NAME] [--jobs N] [--compare FILE]

--compare runs the matrix with another version of the runbook too (e.g. the one before the
rewrite: git show engine:runbooks/gpu-oom-recovery.yaml > /tmp/old.yaml) and adds its
verdict and time side by side.

Each row is a `runbook drill` (real SSH to the simulated host, simulated time) run in a
process of its own; nothing on this machine is touched.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runbook_runner.simhost.drill import TOLERANCE  # noqa: E402
from runbook_runner.simhost.scenarios import MATRIX, Scenario  # noqa: E402


def play(scenario: Scenario, runbook: str) -> dict[str, object]:
    argv = [sys.executable, "-m", "runbook_runner", "drill", runbook, "--scenario", scenario.name]
    argv += ["--yes", "--json"] + (["--allow-reboot"] if scenario.allow_reboot else [])
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"scenario": scenario.name, "error": (done.stderr or done.stdout)[-200:]}
    return {**document["drill"], "exit": done.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runbook", default="gpu-oom-recovery")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--compare", metavar="FILE", help="another runbook file, side by side")
    args = parser.parse_args()
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda s: play(s, args.runbook), MATRIX))
        others = list(pool.map(lambda s: play(s, args.compare), MATRIX)) if args.compare else []
    head = "| scenario | ends | recovery (simulated) | ideal | ratio | actions taken | expert's | verdict |"
    print(head + (" the alternative |" if others else ""))
    print("|---|---|---:|---:|---:|---|---|---|" + ("---|" if others else ""))
    failed = 0
    for number, (scenario, row) in enumerate(zip(MATRIX, rows, strict=True)):
        if "error" in row:
            failed += 1
            print(f"| {scenario.name} | error: {row['error']!r} | | | | | | |")
            continue
        recovery, ideal = float(row["recovery_s"]), scenario.ideal_s  # type: ignore[arg-type]
        ends = "goal" if scenario.ends == "goal" else f"stop, exit {scenario.exit_code}"
        actions = list(row["actions"])  # type: ignore[call-overload]
        expert = _group(list(scenario.actions))
        taken = "the same" if set(actions) == set(scenario.actions) else _group(actions)
        verdict = "ok" if row["ok"] else "DIFFERS"
        failed += not row["ok"]
        line = (
            f"| {scenario.name} | {ends} | {recovery:.0f} s | {ideal:.0f} s | "
            f"{recovery / ideal:.2f}x | {_short(taken)} | {_short(expert)} | {verdict} |"
        )
        if others:
            line += " " + _verdict(others[number]) + " |"
        print(line)
    print(
        f"\n{len(MATRIX) - failed} of {len(MATRIX)} rows as the expert would "
        f"(time within {TOLERANCE}x)."
    )
    return 1 if failed else 0


def _verdict(row: dict[str, object]) -> str:
    """The alternative's result in one cell: ok, or what differs, with its time."""
    if "error" in row:
        return "error"
    wrong = [*row["extra"], *(f"-{a}" for a in row["missing"])]  # type: ignore[misc]
    if row["ok"]:
        what = "ok"
    elif wrong:
        what = "DIFFERS: " + _short(_group(wrong), 60)
    else:
        what = "DIFFERS: " + ("slow" if not row["in_time"] else "ends elsewhere")
    return f"{what} ({float(row['recovery_s']):.0f} s)"  # type: ignore[arg-type]


def _group(actions: list[str]) -> str:
    """'SIGTERM 4101, SIGTERM 4120' -> 'SIGTERM 4101 4120': one verb, its targets."""
    if not actions:
        return "none"
    groups: dict[str, list[str]] = {}
    for action in actions:
        verb, _, target = action.rpartition(" ")
        groups.setdefault(verb or action, []).append(target if verb else "")
    return "; ".join(
        f"{verb} {' '.join(t for t in targets if t)}".strip() for verb, targets in groups.items()
    )


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
