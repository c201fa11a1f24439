"""The commands a simulated GPU host answers, in one place for both of its front ends.

The tests' stand-in executables (standin.py: real processes, real signals, one
call per process) and the simulated host's real shell (hostshell.py: stand-ins that
ask the host's server) run these same functions over the same model, so both print
the same formats. A command gets an :class:`Env` (env.py): the host, where to write,
and the process table that signals reach. The commands themselves live by concern:
gpu_tools.py, process_tools.py, file_tools.py, system_tools.py.
"""

from __future__ import annotations

from runbook_runner.simhost.env import Command, Env, ProcessTable, option
from runbook_runner.simhost.file_tools import fuser, rm, stat_
from runbook_runner.simhost.gpu_tools import (
    lsmod,
    modprobe,
    nvidia_cuda_mps_control,
    nvidia_smi,
    rmmod,
)
from runbook_runner.simhost.process_tools import pgrep, pkill, ps
from runbook_runner.simhost.system_tools import (
    curl,
    date,
    df,
    dmesg,
    free,
    journalctl,
    reboot,
    record_only,
    ss,
    systemctl,
)

__all__ = ["COMMANDS", "Command", "Env", "ProcessTable", "option", "rm"]

COMMANDS: dict[str, Command] = {
    "nvidia-smi": nvidia_smi,
    "free": free,
    "dmesg": dmesg,
    "df": df,
    "pkill": pkill,
    "pgrep": pgrep,
    "fuser": fuser,
    "systemctl": systemctl,
    "lsmod": lsmod,
    "rmmod": rmmod,
    "modprobe": modprobe,
    "reboot": reboot,
    "shutdown": record_only,
    "stat": stat_,
    "date": date,
    "curl": curl,
    "ps": ps,
    "journalctl": journalctl,
    "ss": ss,
    "nvidia-cuda-mps-control": nvidia_cuda_mps_control,
}
