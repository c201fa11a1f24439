"""The simulated system tools: free, df, dmesg, date, systemctl, journalctl, curl (a
server's health endpoint and its Prometheus metrics), reboot.
"""

from __future__ import annotations

import fnmatch
import os
import re
import signal

from runbook_runner.simhost import render
from runbook_runner.simhost.env import Env, option
from runbook_runner.simhost.model import (
    DAEMON_PID,
    EPOCH,
    SimProcess,
)


def free(env: Env, args: list[str]) -> int:
    host = env.host
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    divisor = 1024
    for letter, value in (("b", 1), ("k", 1024), ("m", 1024**2), ("g", 1024**3)):
        if letter in flags:
            divisor = value
    lc_all = os.environ.get("LC_ALL") if env.lc_all is None else env.lc_all
    language = (lc_all or host.locale)[:2] if host.locale else "C"
    env.out(render.free(host, divisor, human="h" in flags or "--human" in args, language=language))
    return 0


def df(env: Env, args: list[str]) -> int:
    """df [-P] [-h] [-B1|-k|-BSIZE] [--output=FIELDS] [PATH...] over the model's filesystems."""
    output = option(args, "--output")
    block, human, posix, paths = 1024, False, False, []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-B" and i + 1 < len(args):
            block, skip = _block(args[i + 1]), True
        elif arg.startswith("-B") or arg.startswith("--block-size="):
            block = _block(arg.split("=", 1)[1] if "=" in arg else arg[2:])
        elif arg.startswith("--output"):
            continue
        elif arg in {"-P", "--portability"}:
            posix = True
        elif arg in {"-h", "--human-readable"}:
            human = True
        elif arg == "-k":
            block = 1024
        elif arg.startswith("-"):
            env.err(f"df: option {arg!r} is not simulated\n")
            return 1
        else:
            paths.append(arg)
    fields = output.split(",") if output else None
    if fields and any(f not in render.DF_FIELDS for f in fields):
        env.err(
            f"df: option --output: field {next(f for f in fields if f not in render.DF_FIELDS)!r} unknown\n"
        )
        return 1
    text, errors = render.df(env.host, paths, fields, block, human, posix)
    env.out(text)
    for error in errors:
        env.err(error)
    return 1 if errors else 0


def _block(size: str) -> int:
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
    number = size.rstrip("KMG")
    return int(number or "1") * units[size[len(number) :]]


def dmesg(env: Env, args: list[str]) -> int:
    host = env.host
    env.out("".join(line + "\n" for line in host.kernel_messages))
    return 0


def date(env: Env, args: list[str]) -> int:
    if "+%s" in args:
        env.out(f"{int(env.host.now + EPOCH)}\n")
    else:
        env.out("Mon Nov 30 14:02:11 UTC 2026\n")
    return 0


def systemctl_show(env: Env, args: list[str]) -> int:
    """systemctl show [-p PROP,...] UNIT...: Key=value lines, a blank line between units."""
    wanted: list[str] = []
    units: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in {"-p", "--property"} and i + 1 < len(args):
            wanted += args[i + 1].split(",")
            skip = True
        elif arg.startswith("--property="):
            wanted += arg.split("=", 1)[1].split(",")
        elif arg.startswith("-p") and len(arg) > 2:
            wanted += arg[2:].split(",")
        elif not arg.startswith("-") and arg != "show":
            units.append(arg)
    blocks = []
    for unit in units:
        service = env.host.service(unit)
        name = unit if "." in unit else f"{unit}.service"
        active = service is not None and service.active
        values = {
            "Id": name,
            "LoadState": "loaded" if service else "not-found",
            "ActiveState": "active" if active else "inactive",
            "SubState": "running" if active else "dead",
            "UnitFileState": ("enabled" if service.enabled else "disabled") if service else "",
            "Result": "success",
            "MainPID": str(service.main_pid or DAEMON_PID + env.host.services.index(service))
            if active and service
            else "0",
            "NRestarts": str(service.restarts if service else 0),
            "ExecMainStatus": "0",
            "MemoryCurrent": "1220608" if active else "[not set]",
        }
        keys = [k for k in values if not wanted or k in wanted]
        blocks.append("".join(f"{k}={values[k]}\n" for k in keys))
    env.out("\n".join(blocks))
    return 0


def systemctl(env: Env, args: list[str]) -> int:
    host = env.host
    if "show" in args:
        return systemctl_show(env, args)
    words = [a for a in args if not a.startswith("-")]
    quiet = "--quiet" in args or "-q" in args
    if words[:1] == ["reboot"]:
        return reboot(env, [])
    if words[:1] == ["list-units"]:
        running = "--state=running" in args
        inactive = "--state=inactive" in args
        for listed in host.services:
            if (running and not listed.active) or (inactive and listed.active):
                continue
            state = "active running" if listed.active else "inactive dead"
            env.out(f"{listed.name}.service loaded {state} {listed.name}\n")
        return 0
    if len(words) < 2:
        env.err("systemctl: this stand-in needs VERB UNIT\n")
        return 1
    verb, units = words[0], words[1:]
    for unit in units:
        service = host.service(unit)
        if verb == "is-enabled" and service is None:
            # systemd: nothing on stdout for a unit that is not installed, only the error.
            env.err(
                f"Failed to get unit file state for {unit}.service: No such file or directory\n"
            )
            return 1
        if verb in {"is-active", "is-enabled"}:
            if verb == "is-active":
                yes = service is not None and service.active
                answer = "active" if yes else "inactive"
            else:
                yes = service is not None and service.enabled
                answer = "enabled" if yes else "disabled"
            if not quiet:
                env.out(answer + "\n")
            if not yes:
                return 3 if verb == "is-active" else 1
        elif service is None:
            env.err(f"Failed to {verb} {unit}: Unit {unit} not loaded.\n")
            return 5
        elif verb in {"stop", "start", "restart"}:
            host.act(f"{verb} {service.name}")
            if verb in {"stop", "restart"}:
                service.active = False
                for process in [p for p in host.processes if p.unit == service.name]:
                    # systemd ends the unit's cgroup (SIGTERM, SIGKILL after TimeoutStopSec)
                    if process.exits_at is None and not process.stuck:
                        process.exits_at = host.now + process.teardown_s
            if verb in {"start", "restart"}:
                service.restarts = 0  # systemd flushes NRestarts on a start by hand
                if service.runs:
                    host.start_service(service)
                service.active = True
    return 0


def reboot(env: Env, args: list[str]) -> int:
    """Reboot the simulation: end its server processes, reset its state, drop the session."""
    host = env.host
    for process in host.processes:
        env.procs.signal(process.pid, signal.SIGKILL)
    host.reboot()
    env.on_reboot()
    return 0


TOKENS_PER_S = 1_500.0  # what a serving simulated engine generates
RUNNING = 8  # the requests a serving simulated engine runs


def metrics(process: SimProcess, now: float) -> str | None:
    """A server's /metrics as its kind exposes them (plan/health.py cites the names), or None
    (404): vLLM always serves them, SGLang only with --enable-metrics. Serving, its token
    counter advances with the simulated clock; livelocked, requests wait and it stands still."""
    command = process.cmdline
    if "vllm" in command:
        running, waiting, tokens = (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:generation_tokens_total",
        )
    elif "sglang" in command and "--enable-metrics" in command:
        running, waiting, tokens = (
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:generation_tokens_total",
        )
    else:
        return None
    served = max(0.0, now - max(process.born, process.starts_at))
    if process.livelocked:
        counts = (0, process.livelocked, TOKENS_PER_S * 600)
    else:
        counts = (RUNNING, 0, TOKENS_PER_S * served)
    label = '{model_name="default"}'
    lines = []
    kinds = ("gauge", "gauge", "counter")
    for name, kind, value in zip((running, waiting, tokens), kinds, counts, strict=True):
        lines += [f"# TYPE {name} {kind}", f"{name}{label} {float(value)!r}"]
    return "\n".join(lines) + "\n"


def curl(env: Env, args: list[str]) -> int:
    """curl [-sS] [--fail] [-o FILE] [-w '%{http_code}'] [--max-time S]
    http://127.0.0.1:PORT/PATH: a server's health endpoint or its /metrics, as the process
    that listens on PORT answers them."""
    url = next((a for a in args if a.startswith("http://")), None)
    match = re.match(r"http://(?:127\.0\.0\.1|localhost)(?::(\d+))?(/.*)?$", url or "")
    if match is None:
        env.err(f"curl: (6) Could not resolve host in {url!r}\n")
        return 6
    port = int(match[1] or 80)
    write = option(args, "-w", "--write-out") or ""
    host = env.host
    listening = [
        p
        for p in host.processes
        if p.listens == port and env.procs.alive(p.pid) and host.now >= p.starts_at
    ]
    if not listening:
        env.err(
            f"curl: (7) Failed to connect to 127.0.0.1 port {port} after 0 ms: "
            "Couldn't connect to server\n"
        )
        return 7
    server = listening[0]
    if server.health == "hung" or server.exits_at is not None or server.stuck:
        seconds = option(args, "--max-time", "-m") or "5"
        env.err(
            f"curl: (28) Operation timed out after {float(seconds) * 1000:.0f} milliseconds "
            "with 0 bytes received\n"
        )
        return 28
    if match[2] == "/metrics":
        text = metrics(server, host.now)
        code, body = ("200", text) if text is not None else ("404", "Not Found")
    else:
        code = "200" if server.health == "ok" else "503"
        body = "OK" if code == "200" else "unhealthy"
    if int(code) >= 400 and ("--fail" in args or "-f" in args):
        env.err(f"curl: (22) The requested URL returned error: {code}\n")
        return 22
    env.out(("" if "-o" in args else body) + write.replace("%{http_code}", code))
    return 0


def journalctl(env: Env, args: list[str]) -> int:
    """journalctl -u PATTERN [-u ...] [-n N] [--no-pager] [-o cat] [--since ...]: the log
    lines of the units the glob patterns name (the simulated journal keeps no time)."""
    patterns = [args[i + 1] for i, a in enumerate(args[:-1]) if a in {"-u", "--unit"}]
    patterns += [a.split("=", 1)[1] for a in args if a.startswith("--unit=")]
    count = int(option(args, "-n", "--lines") or "10")
    lines = []
    for service in env.host.services:
        unit = f"{service.name}.service"
        if any(
            fnmatch.fnmatchcase(unit, p) or fnmatch.fnmatchcase(service.name, p) for p in patterns
        ):
            lines += service.log
    if not lines:
        env.out("-- No entries --\n")
        return 0
    env.out("".join(line + "\n" for line in lines[-count:]))
    return 0


def record_only(env: Env, args: list[str]) -> int:
    return 0


def ss(env: Env, args: list[str]) -> int:
    """ss -ltnp: the TCP ports the simulated processes listen on, each with its process
    (``users:(("python3",pid=4101,fd=23))``), as iproute2 prints them."""
    flags = "".join(a.lstrip("-") for a in args if a.startswith("-") and not a.startswith("--"))
    if "l" not in flags or "t" not in flags:
        env.err("ss: only the listening TCP sockets (-ltn) are simulated\n")
        return 1
    host = env.host
    if "H" not in flags:
        env.out("State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process\n")
    for p in host.processes:
        if p.listens is None or not env.procs.alive(p.pid) or host.now < p.starts_at:
            continue
        name = p.cmdline.split(" ")[0].rsplit("/", 1)[-1][:15]
        users = f'users:(("{name}",pid={p.pid},fd=23))' if "p" in flags else ""
        env.out(f"LISTEN 0      2048         0.0.0.0:{p.listens}      0.0.0.0:*    {users}\n")
    return 0
