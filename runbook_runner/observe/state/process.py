"""Process state: ``ps`` lines, processes with what says who owns them, systemd units."""

from __future__ import annotations

from dataclasses import dataclass

from runbook_runner.observe.state.fields import OpenRecord, extra_values, reported


@dataclass(frozen=True)
class HostProcess:
    """One line of ``ps -eo pid,stat,args``."""

    pid: int | None = reported("pid")
    state: str | None = reported("state")  # the first letter of STAT: R S D Z T I ...
    stat: str | None = reported("stat")  # STAT as printed, state and flags ("Dl", "Z+")
    command: str | None = reported("command")

    def describe(self) -> str:
        return f"process {self.pid} [{self.stat or '?'}] ({(self.command or '?')[:80]})"

    def target(self) -> str:
        return f"PID {self.pid} [{self.stat or '?'}] ({(self.command or '?')[:80]})"


@dataclass(frozen=True)
class ProcessOwner:
    """One process (and one GPU it holds, if any) with what says who it belongs to.

    The parser fills the facts (tree, cgroup, device files); plan/ownership.py, given the
    runbook's subject, fills the verdict: ``owner`` ('ours', 'orphaned-ours',
    'another-owner', 'infrastructure', 'unknown') with its ``evidence``, the subject
    instance it belongs to, that instance's ``health``, and the ``disposition``: 'act'
    (ours and broken), 'leave' (with ``reason``) or 'cannot-tell'.
    """

    pid: int | None = reported("pid")
    ppid: int | None = reported("parent pid")
    pgid: int | None = reported("process group")
    sid: int | None = reported("session")
    user: str | None = reported("user")
    age_s: int | None = reported("age", "s")
    stat: str | None = reported("stat")
    state: str | None = reported("state")
    cgroup: str | None = reported("cgroup")
    owner_kind: str | None = reported("owner kind")  # unit, container, slurm-job, session, ''
    owner_name: str | None = reported("owner name")
    unit: str | None = reported("unit")
    command: str | None = reported("command")
    device: str | None = reported("device")
    minor_number: int | None = reported("minor number")
    node_wide: bool | None = reported("node-wide device")
    holds_gpu: bool | None = reported("holds a GPU")
    in_ps: bool | None = reported("listed by ps")
    # Read from /proc/PID of each holder of /dev/nvidia* (environ, loginuid, exe, mountinfo), from
    # ss -ltnp and from the MPS control daemon: more evidence of whose a process is.
    slurm_job_id: str | None = reported("SLURM_JOB_ID")
    kubernetes: str | None = reported("Kubernetes environment")  # KUBERNETES_SERVICE_HOST=...
    ray: str | None = reported("Ray environment")  # RAY_RAYLET_PID=..., RAY_JOB_ID=...
    cuda_visible_devices: str | None = reported("CUDA_VISIBLE_DEVICES")
    loginuid: int | None = reported("login uid")  # None: unset (4294967295) or unread
    container_id: str | None = reported("container (mountinfo)")
    executable: str | None = reported("executable (/proc/PID/exe)")
    listening: str | None = reported("listening TCP ports")  # "8000,8001"
    mps_server: int | None = reported("MPS server")  # the MPS server PID it is a client of
    owner: str | None = reported("owner")
    evidence: str | None = reported("evidence")
    subject: bool | None = reported("the subject's")
    instance: int | None = reported("instance")
    port: int | None = reported("port")
    health: str | None = reported("health")
    disposition: str | None = reported("disposition")
    reason: str | None = reported("reason")
    healthy_servers: int | None = reported("healthy servers on the host")
    crash_loop: bool | None = reported("its unit crash-loops")

    def describe(self) -> str:
        on = f" on {self.device}" if self.device else ""
        return (
            f"process {self.pid} ({(self.command or '?')[:60]}){on}: {self.owner or 'unclassified'}"
        )

    def target(self) -> str:
        why = f": {self.owner}, {self.reason}" if self.owner else ""
        return f"PID {self.pid} [{self.stat or '?'}] ({(self.command or '?')[:80]}){why}"


@dataclass(frozen=True)
class UnitProperties(OpenRecord):
    """One unit as ``systemctl show -p ...`` prints it (``Key=value`` lines).

    Properties become fields by the same rule as meminfo (``ActiveState`` -> ``active_state``);
    the common ones are typed below, any other is ``str | None``. ``[not set]`` and empty
    values are ``None``.
    """

    id: str | None = reported("Id")
    load_state: str | None = reported("LoadState")
    active_state: str | None = reported("ActiveState")
    sub_state: str | None = reported("SubState")
    unit_file_state: str | None = reported("UnitFileState")
    result: str | None = reported("Result")
    main_pid: int | None = reported("MainPID")
    nrestarts: int | None = reported("NRestarts")
    exec_main_status: int | None = reported("ExecMainStatus")
    memory_current_bytes: int | None = reported("MemoryCurrent", "bytes")
    active_enter_timestamp: str | None = reported("ActiveEnterTimestamp")
    extra: tuple[tuple[str, str], ...] = extra_values()

    def describe(self) -> str:
        return f"unit {self.id or '?'}"
