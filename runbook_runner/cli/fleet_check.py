"""``runbook check`` on many hosts: each host's goal checked read-only, in threads, and past
a few hundred hosts in worker processes too (fleet/fanout.py).

Part of the CLI layer (cli/); the selecting, gathering and summary are cli/fleet.py's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from runbook_runner.cli import console, fleet, render
from runbook_runner.cli import host as cli_host
from runbook_runner.errors import Interrupted, TransportError, UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.fleet import summary
from runbook_runner.fleet.stop import HostStop, Stop
from runbook_runner.fleet.summary import HostOutcome
from runbook_runner.runbook import Runbook

if TYPE_CHECKING:
    from runbook_runner.cli.request import Request, Target
    from runbook_runner.fleet.selection import FleetHost


def fleet_check(request: Request, become: str | None) -> int:
    """``become``: the sudo password -K asked for, if any."""
    target = request.target
    if request.json and target.jsonl:
        raise UsageError("--json or --jsonl, not both", "runbook check")
    if target.forks < 1:
        raise UsageError("--forks must be at least 1", "runbook check")
    if target.workers < 0:
        raise UsageError("--workers must be 0 (one per core) or more", "runbook check")
    try:
        hosts = fleet.select_hosts(request)
    except fleet.BadFleetInput:
        return ExitCode.BAD_INPUT
    runbook, params = cli_host.load_with_params(request)
    structured = request.json or target.jsonl
    out = console.Output(structured)
    messages = fleet.Messages()
    stop = Stop()
    forks = max(1, min(target.forks, len(hosts)))
    out.line(f"{runbook.name} on {len(hosts)} hosts (read-only check, {forks} at a time)")

    want_record = bool(structured or request.prometheus)

    def work(host: FleetHost) -> HostOutcome:
        return check_one(
            target,
            become,
            runbook,
            params,
            host,
            messages,
            stop.for_host(),
            want_record=want_record,
        )

    def skipped(host: FleetHost) -> HostOutcome:  # after a signal: not started, said at once
        return fleet.not_started_outcome(host, stop)

    workers = _workers(target, len(hosts))
    with fleet.signals_stop(stop):
        if workers > 1:
            outcomes = _gather_processes(
                out, messages, stop, hosts, work, workers, forks, jsonl=target.jsonl
            )
        else:
            outcomes = fleet.gather(
                out, messages, stop, hosts, work, forks, jsonl=target.jsonl, skipped=skipped
            )
        fleet.print_summary(out, fleet.in_order(outcomes, hosts))
        if request.prometheus:
            from runbook_runner.cli import metrics

            results = [
                metrics.host_result(
                    o.host, o.kind, int(o.code), o.duration_s, o.record.get("checks", ())
                )
                for o in fleet.in_order(outcomes, hosts)
            ]
            metrics.write(request.prometheus, runbook.name, results, "runbook check")
        code = fleet.fleet_end(request, runbook, params, hosts, outcomes)
        return fleet.interrupted_exit(out, stop, outcomes) if stop.stopped else code


def check_one(
    target: Target,
    become: str | None,
    runbook: Runbook,
    params: dict[str, Any],
    host: FleetHost,
    messages: fleet.Messages,
    stop: HostStop,
    *,
    want_record: bool = True,
) -> HostOutcome:
    """One host's goal checked, read-only (``check`` on many hosts; a rollout's ``observe``
    hosts); ``want_record``: its state and checks in the record (--json, --prometheus)."""
    from runbook_runner.cli.outcomes import check_code
    from runbook_runner.engine import Runner

    started = time.monotonic()
    if stop.stop.stopped:
        return fleet.not_started_outcome(host, stop.stop)
    try:
        with fleet.connect(target, become, host, messages, stop) as transport:
            observed = Runner(runbook, params, transport, sleep=stop.sleep).check_goal("now")
    except Interrupted as interrupt:
        return fleet.interrupted_outcome(host, interrupt, started, {})
    except TransportError as error:
        return fleet.transport_outcome(target, host, error, started)
    except Exception as error:  # one host's surprise must not end the others' checks
        return fleet.error_outcome(host, error, started)
    code = check_code(observed.results)
    record: dict[str, Any] = {"ok": code == ExitCode.OK}
    if want_record:
        record["state"] = render.state_json(runbook, observed.state)
        record["checks"] = [render.check_json(r, runbook) for r in observed.results]
    elapsed = time.monotonic() - started
    if code == ExitCode.OK:
        return HostOutcome(host.name, summary.OK, code, "ok", elapsed, record)
    kind = summary.KIND_OF_CODE[code]
    return HostOutcome(host.name, kind, code, fleet.checks_line(observed.results), elapsed, record)


def _workers(target: Target, hosts: int) -> int:
    """Processes for a check: --workers, else one per core once the fleet is large enough
    to be worth a fork (each process has at least a few hosts and threads)."""
    import os

    from runbook_runner.cli.parser import AUTO_WORKERS_FROM

    wanted: int
    if target.workers:
        wanted = target.workers
    elif hosts >= AUTO_WORKERS_FROM:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    else:
        wanted = 1
    return max(1, min(wanted, hosts, target.forks))


def _gather_processes(
    out: console.Output,
    messages: fleet.Messages,
    stop: Stop,
    hosts: Sequence[FleetHost],
    work: Callable[[FleetHost], HostOutcome],
    workers: int,
    forks: int,
    *,
    jsonl: bool,
) -> list[HostOutcome]:
    """As fleet.gather, with the hosts spread over ``workers`` forked processes (threads inside
    each). Each sends back its hosts' outcomes and messages as JSON lines; a signal to this
    process is passed on to them, and each stops its own hosts as _run_one/check_one do."""
    from runbook_runner.fleet.fanout import fan_out_processes

    outcomes: list[HostOutcome] = []
    told: list[bool] = []

    def tick() -> None:
        fleet.announce_stop(out, stop, told)
        messages.drain(out)
        if out.tty:
            out.live(summary.progress(len(outcomes), len(hosts), outcomes))

    def encode(outcome: HostOutcome) -> str:  # in the worker: its messages go along
        said: list[str] = []
        while not messages.lines.empty():
            said.append(messages.lines.get_nowait())
        return json.dumps({"said": said, **outcome.to_json()})

    def decode(text: str) -> HostOutcome:  # here
        record = json.loads(text)
        for line in record.pop("said", ()):
            messages.put(line)
        return _decode_outcome(record)

    tick()
    for outcome in fan_out_processes(
        hosts,
        work,
        workers,
        forks,
        encode=encode,
        decode=decode,
        signalled=lambda: stop.signum,
        tick=tick,
        stopped=lambda: stop.stopped,
    ):
        outcomes.append(outcome)
        if jsonl:
            print(json.dumps(outcome.to_json()), flush=True)
    messages.drain(out)
    out.end_live()
    seen = {o.host for o in outcomes}
    for host in hosts:  # a worker that died (killed, out of memory) leaves its hosts untold
        if host.name not in seen and stop.stopped:  # after a signal: not started (unsent)
            outcomes.append(fleet.not_started_outcome(host, stop))
            if jsonl:
                print(json.dumps(outcomes[-1].to_json()), flush=True)
        elif host.name not in seen:
            line = "internal error: its worker process ended before this host's result"
            lost = HostOutcome(host.name, summary.ERROR, ExitCode.INTERNAL, line, 0.0, {})
            outcomes.append(lost)
    return outcomes


def _decode_outcome(record: dict[str, Any]) -> HostOutcome:
    return HostOutcome(
        record.pop("host"),
        record.pop("outcome"),
        ExitCode(record.pop("exit_code")),
        record.pop("summary"),
        float(record.pop("duration_s")),
        record,
    )
