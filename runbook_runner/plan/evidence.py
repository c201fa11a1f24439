"""What says whose a process is, beside the subject's own patterns (plan/ownership.py):
GPU infrastructure, positive evidence of another owner, and the notes a record carries.

Each function reads the facts of the process-owner listing (observe/proctree.py) and
returns why, in words for the record's evidence, or '': pure, no host involved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from runbook_runner.observe.state import ProcessOwner

# NVIDIA's GPU services keep /dev/nvidia* open on every node. NVIDIA's reset documentation
# says to stop them (as services) before a reset, and start them again after.
INFRASTRUCTURE_UNITS = frozenset(
    {
        "nvidia-persistenced.service",
        "nvidia-dcgm.service",
        "dcgm.service",
        "dcgm-exporter.service",
        "nvidia-dcgm-exporter.service",
        "nvidia-fabricmanager.service",
        "nvidia-mps.service",
        "nvidia-gpu-exporter.service",
    }
)
INFRASTRUCTURE_EXECUTABLES = frozenset(
    {
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "nv-fabricmanager",
        "nvidia-fabricmanager",
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
        "nvidia_gpu_exporter",
        "nvidia-smi",
    }
)
# Where NVIDIA's packages install those programs, as their units start them:
# ExecStart=/usr/bin/nvidia-persistenced (NVIDIA/nvidia-persistenced,
# init/systemd/nvidia-persistenced.service.template), /usr/bin/nv-hostengine (DCGM's
# nvidia-dcgm.service), /usr/bin/nv-fabricmanager (nvidia-fabricmanager.service); the
# driver's installer puts nvidia-smi and nvidia-cuda-mps-* in /usr/bin. Only root writes
# there. Whom they run as: root, or the account their unit names (--user
# nvidia-persistenced, DCGM's --service-account nvidia-dcgm).
INFRASTRUCTURE_FOLDERS = frozenset({"/usr/bin", "/usr/sbin"})
INFRASTRUCTURE_USERS = frozenset({"root", "nvidia-persistenced", "nvidia-dcgm"})


def executable(command: str) -> str:
    first = command.split(None, 1)[0] if command.strip() else ""
    return first.rsplit("/", 1)[-1].rstrip(":")


def infrastructure(facts: ProcessOwner) -> str:
    """Why a process is GPU infrastructure, or '': a GPU service's system unit, or a GPU
    service's program where NVIDIA installs it (``/proc/PID/exe``, which the process cannot
    rename, unlike its command line) run by root or the service's account."""
    if facts.owner_kind == "unit" and facts.unit in INFRASTRUCTURE_UNITS:
        return f"GPU service unit {facts.unit}"
    path = (facts.executable or "").removesuffix(" (deleted)")  # an upgraded package's
    folder, _, name = path.rpartition("/")
    if (
        folder in INFRASTRUCTURE_FOLDERS
        and name in INFRASTRUCTURE_EXECUTABLES
        and facts.user in INFRASTRUCTURE_USERS
    ):
        return f"GPU infrastructure executable {path} (/proc/{facts.pid}/exe), run by {facts.user}"
    return ""


def another_owner(facts: ProcessOwner) -> str:
    """Positive evidence, in its cgroup, that a process is another owner's whatever its
    command line says, or '': a Slurm job's (Slurm ends its own: scancel), a Kubernetes
    pod's (its controller restarts it), a user's own unit's (that user's service manager
    runs it)."""
    kind, cgroup = facts.owner_kind or "", facts.cgroup or ""
    if kind in {"slurm-job", "user-unit"} or "/kubepods" in cgroup:
        return describe_owner(facts) or f"a Kubernetes pod ({cgroup[:120]})"
    return ""


def describe_owner(facts: ProcessOwner) -> str:
    """Whose its cgroup says it is, in words ("Slurm job 777"), or ''."""
    kind, name = facts.owner_kind or "", facts.owner_name or ""
    if kind == "unit":
        return f"unit {name}"
    if kind == "container":
        return f"container {name}"
    if kind == "slurm-job":
        return f"Slurm {name}"
    if kind == "session":
        return f"login {name}, user {facts.user}"
    if kind == "user-unit":
        return f"user {facts.user}'s own unit {name}"
    return ""


RAY_DAEMONS = frozenset({"raylet", "gcs_server"})
# sshd names a login's session process "sshd: USER@pts/N" (or "USER@notty"): what descends
# from one was started from that login.
_SSHD_LOGIN = re.compile(r"^sshd: (?P<user>[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31})@(?P<tty>\S+)")


def told_otherwise(table: Mapping[int, ProcessOwner], pid: int, chain: Sequence[int]) -> str:
    """Where a cgroup names no owner, what else does, with where it was read, or ''.

    Each only ever proves a process *another* owner's (never the subject's: the subject's
    own processes are told by its launcher, workers and their descendants): a Slurm job's
    (SLURM_JOB_ID in its environment), a container's (its /etc/hostname bind-mounted from
    a container runtime's folder), a Kubernetes pod's (KUBERNETES_* in its environment),
    an SSH login's (a ``sshd: USER@TTY`` ancestor), a login's (its loginuid is set: the
    kernel's audit record of the login it was started from, kept through su, sudo and
    nohup).
    """
    facts = table[pid]
    if facts.slurm_job_id:
        return f"Slurm job {facts.slurm_job_id} (SLURM_JOB_ID in /proc/{pid}/environ)"
    if facts.container_id:
        return (
            f"container {facts.container_id} (its /etc/hostname comes from the runtime's "
            f"folder: /proc/{pid}/mountinfo)"
        )
    if facts.kubernetes:
        return f"a Kubernetes pod ({facts.kubernetes} in /proc/{pid}/environ)"
    for ancestor in chain:
        login = _SSHD_LOGIN.match(table[ancestor].command or "")
        if login is not None:
            return (
                f"started from {login['user']}'s SSH login ({login['tty']}, sshd PID "
                f"{ancestor}: parent chain)"
            )
    if facts.loginuid is not None:
        return (
            f"started from the login of uid {facts.loginuid} (/proc/{pid}/loginuid), "
            f"running as {facts.user or '?'}"
        )
    return ""


def ray(table: Mapping[int, ProcessOwner], pid: int, chain: Sequence[int]) -> str:
    """Why a process is a Ray cluster's, or '': a ``ray::`` worker (Ray names its worker
    processes ``ray::Actor.method``) or a descendant of a raylet. Ray restarts the actors it
    loses (max_restarts), as systemd restarts a unit: a signal to one is not a stop; the
    cluster is stopped by its owner (``ray stop``, or its job)."""
    command = table[pid].command or ""
    raylet = next((p for p in chain if executable(table[p].command or "") in RAY_DAEMONS), None)
    if raylet is not None:
        return (
            f"a Ray cluster's: under raylet PID {raylet} (parent chain); Ray restarts its "
            "actors, so only the cluster's owner stops it (ray stop)"
        )
    if command.startswith("ray::") or executable(command) in RAY_DAEMONS:
        return (
            f"a Ray cluster's: {executable(command)[:40]}; Ray restarts its "
            "actors, so only the cluster's owner stops it (ray stop)"
        )
    if table[pid].ray:
        return (
            f"a Ray cluster's: {table[pid].ray} in /proc/{pid}/environ; Ray restarts "
            "its actors, so only the cluster's owner stops it (ray stop)"
        )
    return ""


def visible_devices(record: ProcessOwner, minors: Iterable[int]) -> str:
    """What its CUDA_VISIBLE_DEVICES says beside the device files it holds: a note for the
    record, never a verdict (CUDA numbers the GPUs it is shown in its own order, not by
    minor number). A process that holds more GPUs' files than it was shown took GPUs it
    was not given (someone set CUDA_VISIBLE_DEVICES by hand, or a child reset it)."""
    visible = record.cuda_visible_devices
    if visible is None or record.pid is None:
        return ""
    held = sorted(minors)
    shown = [v for v in visible.split(",") if v.strip()]
    files = ", ".join(f"/dev/nvidia{m}" for m in held) or "no GPU's device file"
    note = (
        f"; its CUDA_VISIBLE_DEVICES={visible[:40]} (/proc/{record.pid}/environ), it holds {files}"
    )
    if len(held) > len(shown):
        note += f": more GPUs than the {len(shown)} it was shown"
    return note


def mps_client(facts: ProcessOwner) -> str:
    """The note on a client of an MPS server (``nvidia-cuda-mps-control get_client_list``),
    or ''."""
    if facts.mps_server is None:
        return ""
    return (
        f"; a client of MPS server PID {facts.mps_server} (nvidia-cuda-mps-control "
        "get_client_list): ended by the control daemon's terminate_client, never "
        "by a signal first"
    )
