"""The simulated GPU and driver tools: nvidia-smi (queries, resets, persistence mode),
lsmod, rmmod and modprobe.
"""

from __future__ import annotations

from runbook_runner.simhost import render
from runbook_runner.simhost.env import Env, option


def nvidia_smi(env: Env, args: list[str]) -> int:
    host = env.host
    if not host.driver_loaded:
        env.out(render.DRIVER_NOT_LOADED)
        return 9
    lost = [g for g in host.gpus if g.lost]
    if lost and not ({"-r", "--gpu-reset"} & set(args)):
        env.out(
            "".join(
                f"Unable to determine the device handle for GPU{g.bus_id}: Unknown Error\n"
                for g in lost
            )
        )
        return 15
    fmt = (option(args, "--format") or "csv").split(",")
    header, units = "noheader" not in fmt, "nounits" not in fmt
    ids_text = option(args, "-i", "--id")
    ids = [int(i) for i in ids_text.split(",")] if ids_text else None
    reads_memory = option(args, "--query-gpu") is not None or "-q" in args or "--query" in args
    for gpu in host.gpus if reads_memory else ():
        if gpu.draining_mib_per_read:  # memory the driver is still giving back, slowly
            gpu.orphaned_mib = max(0, gpu.orphaned_mib - gpu.draining_mib_per_read)
    if "-q" in args or "--query" in args:
        env.out(render.query_detail(host))
        return 0
    try:
        if (fields := option(args, "--query-gpu")) is not None:
            env.out(render.query_gpu(host, fields.split(","), header, units, ids))
            return 0
        if (fields := option(args, "--query-compute-apps")) is not None:
            env.out(render.query_compute_apps(host, fields.split(","), header, units))
            return 0
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
    if "-L" in args:
        env.out("".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in host.gpus))
        return 0
    env.out(render.table(host))
    return 0


def _reset(env: Env, ids: list[int] | None) -> int:
    host = env.host
    if ids is None:
        env.out("ERROR: a GPU reset needs -i with the GPU to reset.\n\n")
        return 255
    for index in ids:
        gpu = host.gpu(index)
        refusal = host.reset(gpu)
        if refusal:
            env.out(render.reset_refused(gpu, refusal))
            return 255
        env.out(render.reset_succeeded(gpu))
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
    if "-r" not in args and any(a in MODULES for a in args):
        if not host.driver_loaded:
            host.act("load the driver")
        host.driver_loaded = True
    return 0
