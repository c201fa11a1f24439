"""A live server's health, as the host answers for it: the requests to make and what
their answers mean.

Pure: the commands (``curl`` on the instance's port, ``systemctl show -p NRestarts`` for
its unit) are made here and sent by the engine; their answers come back here to be judged.
A server is healthy only on a 200; a refused port, a timeout or another status is failing;
anything else (no curl, an odd exit) is "cannot tell", which never leads to an action.

Healthy on two witnesses: where the subject names a metrics path, a server whose health
answered 200 is asked its own Prometheus metrics twice, ``window`` seconds apart, in one
more request (:func:`judge_metrics`). An API process can answer 200 while the engine behind
it is livelocked: requests waiting and not one token generated over the window is broken.
No request at all is healthy and idle. A server without metrics (404: SGLang serves them
only with ``--enable-metrics``) keeps the one-witness verdict, and its reason says so.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runbook_runner.observe.state import ProcessOwner
from runbook_runner.runbook import Subject
from runbook_runner.status import Word


class Health(Word):
    HEALTHY = "healthy"
    FAILING = "failing"
    CANNOT_TELL = "cannot-tell"
    NOT_CHECKED = "not-checked"  # no launcher alive: nothing to ask


@dataclass(frozen=True)
class Probe:
    """One health request to make on the host, for one live instance of the subject."""

    instance: int
    port: int
    url: str
    command: str
    metrics_command: str = ""  # asked only after a 200: two reads of its metrics, a window apart
    metrics_path: str = ""
    window_s: float = 0.0


@dataclass(frozen=True)
class Progress:
    """What a server's own metrics said over the window (the second witness)."""

    kind: str  # whose metric names answered: SGLang's or vLLM's
    running: float  # requests running at the second read
    waiting: float  # requests waiting at the second read
    tokens: float  # tokens generated between the two reads
    window_s: float


@dataclass(frozen=True)
class ProbeResult:
    instance: int
    health: Health
    detail: str
    refused: bool = False  # nothing listens on the port (a server may still be loading)
    progress: Progress | None = None  # None: judged on /health alone


@dataclass(frozen=True)
class MetricNames:
    """One server kind's metrics for requests running and waiting and tokens generated."""

    kind: str
    running: str
    waiting: str
    tokens: str
    per_step: bool  # the token counter moves every engine step (else as a request finishes)


# SGLang, python/sglang/srt/metrics/collector.py at 93d04878cfb9b08645fae7b11bd340ee33b34acf:
# the scheduler's gauges sglang:num_running_reqs and sglang:num_queue_reqs, and the tokenizer
# manager's counter sglang:generation_tokens_total, incremented in
# observe_one_finished_request (when a request finishes, not per step). vLLM,
# vllm/v1/metrics/loggers.py at a6f0308cfe806b7731ad4979c9bea6e470c35efd
# (PrometheusStatLogger): gauges vllm:num_requests_running and vllm:num_requests_waiting, and
# the counter vllm:generation_tokens_total, incremented by each iteration's tokens.
KINDS = (
    MetricNames(
        "SGLang",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:generation_tokens_total",
        per_step=False,
    ),
    MetricNames(
        "vLLM",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:generation_tokens_total",
        per_step=True,
    ),
)
WINDOW_MARK = "@@ window"  # between the two reads of a metrics probe's output


@dataclass(frozen=True)
class UnitProbe:
    """How often systemd restarted one of the subject's units by itself."""

    unit: str
    command: str


def unit_probes(subject: Subject, records: Sequence[ProcessOwner]) -> list[UnitProbe]:
    """One ``systemctl show -p NRestarts`` per unit of the subject that has a process."""
    units = sorted({r.unit for r in records if r.unit and subject.unit_matches(r.unit)})
    return [UnitProbe(u, f"systemctl show -p NRestarts {shlex.quote(u)}") for u in units]


def judge_unit(exit_status: int | None, stdout: str) -> int | None:
    """NRestarts from ``systemctl show``'s answer, or None (cannot tell)."""
    if exit_status != 0:
        return None
    for line in stdout.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "NRestarts" and value.isdigit():
            return int(value)
    return None


def judge_probe(probe: Probe, exit_status: int | None, stdout: str, stderr: str) -> ProbeResult:
    """curl's answer -> healthy, failing (with why), or cannot tell."""
    code = stdout.strip()[-3:]
    said = (stderr.strip().splitlines() or [""])[-1][:120]
    if exit_status == 0 and code == "200":
        return ProbeResult(probe.instance, Health.HEALTHY, f"{probe.url} answered 200")
    if exit_status == 0 and code.isdigit():
        return ProbeResult(probe.instance, Health.FAILING, f"{probe.url} answered {code}")
    if exit_status == 7:
        return ProbeResult(
            probe.instance,
            Health.FAILING,
            f"nothing listens on port {probe.port} ({said})",
            refused=True,
        )
    if exit_status == 28:
        return ProbeResult(probe.instance, Health.FAILING, f"{probe.url} did not answer in time")
    if exit_status in {52, 56}:
        return ProbeResult(probe.instance, Health.FAILING, f"{probe.url} closed the connection")
    if exit_status == 127:
        return ProbeResult(probe.instance, Health.CANNOT_TELL, "curl is not installed on the host")
    return ProbeResult(
        probe.instance,
        Health.CANNOT_TELL,
        f"the health request exited {exit_status}" + (f": {said}" if said else ""),
    )


def probe_of(subject: Subject, instance: int, port: int) -> Probe:
    """The health request for one instance on its port, with its metrics' where the subject
    names them."""
    url = f"http://127.0.0.1:{int(port)}{subject.health_path}"
    command = (
        f"curl -sS -o /dev/null -w '%{{http_code}}' --max-time {subject.health_timeout_s:g} "
        f"{shlex.quote(url)}"
    )
    metrics = metrics_command(subject, port) if subject.metrics_path else ""
    return Probe(
        instance, port, url, command, metrics, subject.metrics_path, subject.metrics_window_s
    )


def metrics_command(subject: Subject, port: int) -> str:
    """Two reads of the server's metrics, ``window`` seconds apart, in one request; the
    second only when the first answered (``--fail``: a 404 is an exit of 22)."""
    url = shlex.quote(f"http://127.0.0.1:{int(port)}{subject.metrics_path}")
    read = f"curl -sS --fail --max-time {subject.health_timeout_s:g} {url}"
    return f"{read} && printf '\\n{WINDOW_MARK}\\n' && sleep {subject.metrics_window_s:g} && {read}"


def parse_exposition(text: str) -> dict[str, float]:
    """Prometheus's text exposition format -> each metric's samples summed over their labels
    (a server with several engines or ranks reports one sample per label set). Comments, and
    lines that are not ``name[{labels}] value [timestamp]``, are skipped."""
    totals: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            closing = _labels_end(rest)
            if closing < 0:
                continue
            rest = rest[closing + 1 :]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not name or not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            totals[name.strip()] = totals.get(name.strip(), 0.0) + value
    return totals


def _labels_end(rest: str) -> int:
    """Where a label set's closing brace is (label values may hold '}' inside quotes)."""
    quoted = escaped = False
    for i, char in enumerate(rest):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return i
    return -1


def judge_metrics(
    probe: Probe, health: ProbeResult, exit_status: int | None, stdout: str, stderr: str
) -> ProbeResult:
    """The second witness: the metrics probe's answer refines a 200 from /health into healthy
    (serving, or idle), broken (livelocked), or healthy on /health alone (no metrics)."""
    if health.health is not Health.HEALTHY:
        return health
    first, marked, second = stdout.partition(WINDOW_MARK)
    said = (stderr.strip().splitlines() or [""])[-1][:120]
    if exit_status != 0 or not marked:
        if exit_status is None:
            why = "its metrics did not answer in time"
        elif exit_status == 22 and "404" in said:
            why = f"no {probe.metrics_path} (404)"
        elif exit_status == 22:
            why = f"its metrics answered an error ({said})"
        elif exit_status == 127:
            why = "curl or sleep is missing on the host"
        elif exit_status == 0:
            why = "its metrics answered once, not twice"
        else:
            why = f"its metrics could not be read (exit {exit_status}" + (
                f": {said})" if said else ")"
            )
        return _alone(probe, health, why)
    before, after = parse_exposition(first), parse_exposition(second)
    names = _kind_of(after)
    if names is None:
        return _alone(probe, health, "its metrics show neither SGLang's nor vLLM's request gauges")
    if names.tokens not in before or names.tokens not in after:
        return _alone(probe, health, f"its metrics lack {names.tokens}")
    if after[names.tokens] < before[names.tokens]:
        return _alone(probe, health, f"{names.tokens} went back (it restarted in the window)")
    progress = Progress(
        names.kind,
        after.get(names.running, 0.0),
        after.get(names.waiting, 0.0),
        after[names.tokens] - before[names.tokens],
        probe.window_s,
    )
    return _judged(health, names, progress)


def _kind_of(metrics: Mapping[str, float]) -> MetricNames | None:
    for names in KINDS:
        if names.running in metrics or names.waiting in metrics:
            return names
    return None


def _alone(probe: Probe, health: ProbeResult, why: str) -> ProbeResult:
    path = "/" + probe.url.partition("://")[2].partition("/")[2]
    return dataclasses.replace(health, detail=f"{health.detail}; healthy on {path} alone: {why}")


def _judged(health: ProbeResult, names: MetricNames, progress: Progress) -> ProbeResult:
    window = f"{progress.window_s:g} s"
    running, waiting = int(progress.running), int(progress.waiting)
    if waiting > 0 and progress.tokens == 0 and (running == 0 or names.per_step):
        return dataclasses.replace(
            health,
            health=Health.FAILING,
            detail=f"livelocked: {waiting} requests waiting, 0 tokens in {window} "
            f"({health.detail}, but {names.waiting} and {names.tokens} say nothing moves)",
            progress=progress,
        )
    if running == 0 and waiting == 0:
        said = f"{health.detail}, idle: no request running or waiting ({names.kind} metrics)"
    else:
        said = (
            f"{health.detail}, {running} requests running, {waiting} waiting, "
            f"{int(progress.tokens):,} tokens in {window} ({names.kind} metrics)"
        )
        if progress.tokens == 0:
            said += f"; {names.kind} counts tokens as a request finishes, and none did"
    return dataclasses.replace(health, detail=said, progress=progress)


def launcher_port(subject: Subject, launcher: ProcessOwner) -> tuple[int | None, str]:
    """The port to ask a launcher's health on, and how it was told: its ``--port``; else the
    one port it listens on (``ss -ltnp``: a port set in a config file is not on the command
    line); else, of several, the kind's default if it is one of them; else the kind's
    default (a launcher that listens on nothing yet is loading). Several ports, none the
    default: (None, why). Never another process's command line: a port is the launcher's."""
    command = launcher.command or ""
    flagged = dataclasses.replace(subject, ports=()).port_of(command)
    if flagged is not None:
        return flagged, "its --port"
    default = subject.port_of(command)
    listening = [int(p) for p in (launcher.listening or "").split(",") if p.isdigit()]
    if len(listening) == 1:
        return listening[0], "the one port its launcher listens on (ss -ltnp)"
    if listening and default in listening:
        return default, "its kind's default, one of the ports its launcher listens on (ss -ltnp)"
    if listening:
        ports = ", ".join(str(p) for p in listening)
        return None, (
            f"its launcher listens on ports {ports} (ss -ltnp), no --port says which serves "
            "its health, and none is its kind's default"
        )
    return default, "its kind's default" if default is not None else ""
