"""The simulated GPU and driver tools: nvidia-smi (queries, resets, persistence mode),
lsmod, rmmod and modprobe.
"""

from __future__ import annotations

from runbook_runner.simhost import render
from runbook_runner.simhost.env import Env, option
from runbook_runner.simhost.model import SimHost

NO_DEVICES = "No devices were found\n"


def _ids(host: SimHost, text: str | None) -> list[int] | None:
    """``-i``: a comma-separated list of indexes, PCI bus ids or UUIDs (None: every GPU).
    Raises KeyError for one that names no GPU."""
    if not text:
        return None
    chosen = []
    for word in (w.strip() for w in text.split(",")):
        for gpu in host.gpus:
            if (
                word == str(gpu.index)
                or word.lower() == gpu.uuid.lower()
                or _same_bus(word, gpu.bus_id)
            ):
                chosen.append(gpu.index)
                break
        else:
            raise KeyError(word)
    return chosen


def _same_bus(word: str, bus_id: str) -> bool:
    if word.count(":") != 2:
        return False
    domain, rest = word.split(":", 1)
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}" == bus_id.upper()
    except ValueError:
        return False


def nvidia_smi(env: Env, args: list[str]) -> int:
    host = env.host
    if not host.driver_loaded:
        env.out(render.DRIVER_NOT_LOADED)
        return 9
    if host.library_mismatch:
        env.out(render.library_mismatch(host))
        return 18
    try:
        ids = _ids(host, option(args, "-i", "--id"))
    except KeyError:
        env.out(NO_DEVICES)
        return 6
    chosen = render.selected(host, ids)
    lost = [g for g in chosen if g.lost]
    if args[:1] == ["mig"]:
        return _mig(env, args[1:], ids)
    if args[:1] == ["topo"]:
        if not {"-m", "--matrix"} & set(args):
            env.out("ERROR: this simulated host answers nvidia-smi topo -m only.\n\n")
            return 2
        env.out(render.topology(host))
        return 0
    queries = option(args, "--query-gpu", "--query-compute-apps") is not None
    detail = "-q" in args or "--query" in args
    if lost and not (queries or detail or "-L" in args or {"-r", "--gpu-reset"} & set(args)):
        env.out("".join(render.device_handle_lost(g) for g in lost))
        return 15
    fmt = (option(args, "--format") or "csv").split(",")
    header, units = "noheader" not in fmt, "nounits" not in fmt
    reads_memory = option(args, "--query-gpu") is not None or detail
    for gpu in chosen if reads_memory else ():
        if gpu.draining_mib_per_read:  # memory the driver is still giving back, slowly
            gpu.orphaned_mib = max(0, gpu.orphaned_mib - gpu.draining_mib_per_read)
    status = 15 if lost else 0  # the others' report is printed; the lost one's line says why
    if detail:
        sections = tuple(
            s.strip().upper()
            for s in (option(args, "-d", "--display") or "").split(",")
            if s.strip()
        )
        unknown = [s for s in sections if s not in render.SECTIONS]
        if unknown:
            env.out(f"ERROR: {unknown[0]} is not a -d section this host answers.\n\n")
            return 2
        env.out(render.query_detail(host, ids, sections))
        return status
    try:
        if (fields := option(args, "--query-gpu")) is not None:
            env.out(render.query_gpu(host, fields.split(","), header, units, ids))
            return status
        if (fields := option(args, "--query-compute-apps")) is not None:
            env.out(render.query_compute_apps(host, fields.split(","), header, units, ids))
            return status
    except render.QueryError as error:
        env.out(str(error))
        return 2
    if "-r" in args or "--gpu-reset" in args:
        return _reset(env, ids)
    if "-pm" in args or "--persistence-mode" in args:
        enabled = (option(args, "-pm", "--persistence-mode") or "1") in {"1", "ENABLED"}
        refused = False
        for gpu in host.gpus:
            if ids is None or gpu.index in ids:
                if not enabled and gpu.persistence_locked:
                    host.note(f"persistence off was refused for GPU {gpu.index}")
                    env.out(f"Unable to set persistence mode for GPU {gpu.bus_id}: Unknown Error\n")
                    refused = True
                    continue
                gpu.persistence = enabled
                host.act(f"persistence {'on' if enabled else 'off'} GPU {gpu.index}")
                state = "Enabled" if enabled else "Disabled"
                env.out(f"{state} persistence mode for GPU {gpu.bus_id}.\n")
        if refused:
            env.out("Terminating early due to previous errors.\n")
            return 2
        env.out("All done.\n")
        return 0
    if "-L" in args or "--list-gpus" in args:
        env.out(render.gpu_list(host, ids))
        return status
    env.out(render.table(host))
    return 0


def _mig(env: Env, args: list[str], ids: list[int] | None) -> int:
    """``nvidia-smi mig -lgi`` / ``-lci`` (``--list-gpu-instances`` / ``--list-compute-instances``),
    ``-i`` honoured; other MIG commands change the partitioning: this host refuses them."""
    if {"-lgi", "--list-gpu-instances"} & set(args):
        text = render.gpu_instances(env.host, ids)
    elif {"-lci", "--list-compute-instances"} & set(args):
        text = render.compute_instances(env.host, ids)
    else:
        env.out("ERROR: this simulated host lists MIG instances (-lgi, -lci) only.\n\n")
        return 2
    env.out(text)
    return 6 if text == render.NO_MIG else 0


def _reset(env: Env, ids: list[int] | None) -> int:
    host = env.host
    if ids is None:
        env.out("ERROR: a GPU reset needs -i with the GPU to reset.\n\n")
        return 255
    groups = {tuple(host.reset_group(host.gpu(index))) for index in ids}
    if any(len(group) > 1 for group in groups):
        return _reset_together(env, ids, groups)
    for index in ids:
        gpu = host.gpu(index)
        refusal = host.reset(gpu)
        if refusal:
            env.out(render.reset_refused(gpu, refusal))
            return 255
        env.out(render.reset_succeeded(gpu))
    return 0


def _reset_together(env: Env, ids: list[int], groups: set[tuple[int, ...]]) -> int:
    """A reset on a fabric whose GPUs are reset only with their NVLink peers (nvidia-smi(1),
    -r: "If the -i option does not specify a complete set of NVLink GPUs to reset, this
    command will issue an error identifying the additional GPUs that must be included in
    the reset command"). The man page gives no wording nor exit status: the text here is
    shaped after it, and 255 is its RETURN VALUE for "Other error". A complete set is reset
    together, all or nothing."""
    host = env.host
    missing = sorted({i for group in groups for i in group} - set(ids))
    if missing:
        for index in ids:  # what was tried, as a reset of each GPU named
            host.act(f"reset GPU {index}")
        host.note(
            f"the reset of GPU {','.join(map(str, ids))} was refused: GPUs "
            f"{','.join(map(str, missing))}, NVLinked to it, must be reset in the same command"
        )
        env.out(
            "The following GPUs must be reset in the same command as the GPUs given with -i "
            "(they have NVLink connections to them):\n"
            + "".join(f"  GPU {host.gpu(i).bus_id}\n" for i in missing)
            + "\n"
        )
        return 255
    gpus = [host.gpu(i) for i in sorted(ids)]
    refused = host.reset_together(gpus)
    if refused is not None:
        env.out(render.reset_refused(*refused))
        return 255
    env.out("".join(render.reset_succeeded(g) for g in gpus))
    return 0


MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")


def lsmod(env: Env, args: list[str]) -> int:
    host = env.host
    env.out("Module                  Size  Used by\n")
    if host.driver_loaded:
        for module in MODULES:
            env.out(f"{module:<24}{1_000_000:>8}  0\n")
    return 0


def rmmod(env: Env, args: list[str]) -> int:
    host = env.host
    for module in [a for a in args if not a.startswith("-")]:
        if not host.driver_loaded:
            env.err(f"rmmod: ERROR: Module {module} is not currently loaded\n")
            return 1
        held = any(p.gpu_mib for p in host.processes) or any(
            s.active and s.holds_gpus for s in host.services
        )
        if held or (host.module_held_by and module in {"nvidia_drm", "nvidia_modeset", "nvidia"}):
            env.err(f"rmmod: ERROR: Module {module} is in use\n")
            return 1
        if module == "nvidia":
            host.act("unload the driver")
            host.driver_loaded = False
            for gpu in host.gpus:
                gpu.orphaned_mib = 0
    return 0


def modprobe(env: Env, args: list[str]) -> int:
    host = env.host
    if "-r" not in args and host.module_missing:
        for module in [a for a in args if a in MODULES]:
            env.err(
                f"modprobe: FATAL: Module {module} not found in directory "
                f"/lib/modules/{host.kernel_release}\n"
            )
            return 1
    if "-r" not in args and any(a in MODULES for a in args):
        if not host.driver_loaded:
            host.act("load the driver")
        host.load_driver()
    return 0


def nvidia_cuda_mps_control(env: Env, args: list[str]) -> int:
    """nvidia-cuda-mps-control, one command of its stdin per call (the stand-in's wrapper
    reads the lines): ``get_server_list``, ``get_client_list SERVER``, ``terminate_client
    SERVER CLIENT`` (recorded ``terminate_client CLIENT``; the client exits, its work
    cancelled by the server, as NVIDIA documents). A host with no control daemon running
    answers as the real one does without its pipe."""
    host = env.host

    def executable(command: str) -> str:
        return command.split(" ")[0].rsplit("/", 1)[-1]

    daemons = [
        p
        for p in host.processes
        if executable(p.cmdline) == "nvidia-cuda-mps-control" and env.procs.alive(p.pid)
    ]
    if not daemons:
        env.err("Cannot find MPS control daemon process\n")
        return 1
    words = " ".join(args).split()
    servers = [
        p
        for p in host.processes
        if executable(p.cmdline) == "nvidia-cuda-mps-server" and env.procs.alive(p.pid)
    ]
    if words == ["get_server_list"]:
        env.out("".join(f"{p.pid}\n" for p in servers))
        return 0
    if len(words) == 2 and words[0] == "get_client_list" and words[1].isdigit():
        server = int(words[1])
        clients = [p for p in host.processes if p.mps_server == server and env.procs.alive(p.pid)]
        env.out("".join(f"{p.pid}\n" for p in clients))
        return 0
    if len(words) == 3 and words[0] == "terminate_client" and all(w.isdigit() for w in words[1:]):
        server, pid = int(words[1]), int(words[2])
        client = next(
            (
                p
                for p in host.processes
                if p.pid == pid and p.mps_server == server and env.procs.alive(p.pid)
            ),
            None,
        )
        host.act(f"terminate_client {pid}")
        if client is not None and client.exits_at is None:
            client.exits_at = host.now + 1.0  # the server cancels its work; it exits
        env.out("0\n" if client is not None else "")
        return 0
    env.err(f"Unknown command: {' '.join(words)[:60]}\n")
    return 1
