"""A parser's own command: the command whose output only that parser reads.

Some parsers read a listing made of sections (``@@ fuser``, ``@@ topo``, ``@@ timed-out
BUS``) that one command prints and nothing else does: the command and its parser are one
contract, tested together. A runbook's observation that names such a parser and gives no
``command`` runs the parser's own (``holders: {parser: process-owners, root: true}``); one
that gives a ``command`` runs that instead. ``runbook show``, the runbook's page on the site
and ``runbook show --parsers`` print the command in full.

Each command is one line, written here in parts; a part ends at a ``;`` so the line reads
as the shell reads it. Pure data: nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OwnCommand:
    text: str  # the command line, as sent
    description: str  # what it gathers, for an observation that gives none


# Every process but the kernel's threads, who holds which /dev/nvidia*, what else names each
# holder's owner, who listens where (the health port), and the MPS control daemon's clients.
_PROCESS_OWNERS = (
    "ps -ww -N --ppid 2 -o pid,ppid,pgid,sid,user:32,etimes,stat,cgroup:4096,args; "
    "echo '@@ fuser'; "
    "fuser -v /dev/nvidia* 2>&1; "
    "echo '@@ proc'; "
    "for p in $(fuser /dev/nvidia* 2>/dev/null | tr -s ' ' '\\n' | sort -un); do "
    "p=${p%%[!0-9]*}; "
    "case $p in ''|*[!0-9]*) continue;; esac; "
    "cat /proc/$p/environ 2>/dev/null | tr '\\n\\0' ' \\n' "
    "| grep -E '^(SLURM_JOB_ID|KUBERNETES_SERVICE_HOST|KUBERNETES_PORT|RAY_RAYLET_PID"
    "|RAY_JOB_ID|RAY_ADDRESS|RAY_NODE_ID|CUDA_VISIBLE_DEVICES)=' "
    '| sed "s/^/$p /"; '
    'echo "$p loginuid=$(cat /proc/$p/loginuid 2>/dev/null)"; '
    "echo \"$p exe=$(readlink /proc/$p/exe 2>/dev/null | tr '\\n' ' ')\"; "
    "cat /proc/$p/mountinfo 2>/dev/null "
    '| awk \'$5 == "/etc/hostname" || $5 == "/etc/hosts" {print $4}\' '
    '| sed "s|^|$p mount=|"; '
    "done; "
    "echo '@@ listening'; "
    "ss -ltnp 2>/dev/null; "
    "echo '@@ mps'; "
    "d=$(pgrep -x nvidia-cuda-mps 2>/dev/null | head -n 1); "
    "case $d in *[!0-9]*) d=;; esac; "
    'if [ -n "$d" ]; then echo "daemon $d"; '
    "pipe=$(cat /proc/$d/environ 2>/dev/null | tr '\\0' '\\n' "
    "| sed -n 's/^CUDA_MPS_PIPE_DIRECTORY=//p' | head -n 1); "
    'export CUDA_MPS_PIPE_DIRECTORY="/proc/$d/root${pipe:-/tmp/nvidia-mps}"; '
    "for s in $(echo get_server_list | timeout 10 nvidia-cuda-mps-control 2>/dev/null); do "
    "case $s in ''|*[!0-9]*) continue;; esac; "
    'echo "server $s"; '
    'echo "get_client_list $s" | timeout 10 nvidia-cuda-mps-control 2>/dev/null '
    '| sed "s/^/client $s /"; '
    "done; fi; "
    "echo '@@ end'"
)

# nvidia-smi -q; when it gives no answer in 20 s, each GPU by its bus id (8 s each), so one
# GPU that hangs is that GPU's fault ("@@ timed-out BUS"), not a blind run.
_GPUS_DETAIL = (
    "if out=$(timeout 20 nvidia-smi -q 2>&1); then s=0; else s=$?; fi; "
    'if [ "$s" != 124 ]; then printf \'%s\\n\' "$out"; exit "$s"; fi; '
    "echo '@@ nvidia-smi -q gave no answer in 20 s: asking each GPU'; "
    "for d in /proc/driver/nvidia/gpus/*; do "
    '[ -e "$d" ] || continue; '
    "b=${d##*/}; "
    'if out=$(timeout 8 nvidia-smi -q -i "$b" 2>&1); then printf \'%s\\n\' "$out"; '
    'elif [ "$?" = 124 ]; then echo "@@ timed-out $b"; '
    "else printf '%s\\n' \"$out\"; fi; "
    "done"
)

_GPU_FABRIC = (
    "echo '@@ topo'; "
    "timeout 20 nvidia-smi topo -m 2>&1; "
    "echo '@@ fabric-manager'; "
    "systemctl is-active nvidia-fabricmanager; "
    "echo '@@ query'; "
    "timeout 20 nvidia-smi -q 2>&1"
)

_SHM_SEGMENTS = (
    "date +%s; "
    'for f in /dev/shm/*; do if [ -e "$f" ]; then '
    'if fuser -s "$f" 2>/dev/null; then h=held; else h=free; fi; '
    'stat -c "%s %U %Y $h %n" "$f"; '
    "fi; done"
)

OWN_COMMANDS: dict[str, OwnCommand] = {
    "process-owners": OwnCommand(
        _PROCESS_OWNERS,
        "Every process with its parent, session, user, cgroup and /dev/nvidia* files, "
        "classified against the subject with its evidence; a live server's health endpoint is "
        "asked (its --port, else the one port its launcher listens on, else the kind's "
        "default). For each holder, what else names its owner: its environment (SLURM_JOB_ID, "
        "KUBERNETES_*, RAY_*, CUDA_VISIBLE_DEVICES), login uid, executable (/proc/PID/exe), "
        "the container of its /etc/hostname (mountinfo); and the MPS control daemon's clients.",
    ),
    "gpus-detail": OwnCommand(
        _GPUS_DETAIL,
        "nvidia-smi -q: each GPU's minor number (/dev/nvidiaN), persistence and MIG mode, MIG "
        'processes and memory; "Unknown Error", "GPU is lost", "GPU requires reset" are that '
        "GPU's fault. No answer in 20 s: asked GPU by GPU (-i BUS-ID, each in "
        "/proc/driver/nvidia/gpus, 8 s each): one GPU that hangs does not blind the run.",
    ),
    "gpu-fabric": OwnCommand(
        _GPU_FABRIC,
        "What a GPU reset reaches: each GPU's NVLink peers (nvidia-smi topo -m), architecture "
        "(nvidia-smi -q) and whether Fabric Manager runs. Before Ampere, and on Ampere with "
        "NVLinks while Fabric Manager does not run, a GPU is reset only together with every "
        "GPU NVLinked to it (nvidia-smi(1), -r): such a reset is held back while any of them "
        "is left alone. Not answered: what a reset reaches cannot be told (the whole node).",
    ),
    "shm-segments": OwnCommand(
        _SHM_SEGMENTS,
        "The files of /dev/shm with size, owner, age and whether a live process holds them.",
    ),
}
