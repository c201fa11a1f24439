"""Parser for a vLLM launch command line: the flags that decide host memory use.

    vllm serve MODEL --tensor-parallel-size 8 --cpu-offload-gb 40 --kv-offloading-size 200

Both ``--flag value`` and ``--flag=value`` forms; ``-tp`` and ``-pp`` are the short forms of
``--tensor-parallel-size`` and ``--pipeline-parallel-size``. Flags not given are ``None``.
The scopes differ (vllm/config/cache.py, vllm/config/offload.py): ``--cpu-offload-gb`` and
``--swap-space`` are GiB **per GPU**; ``--kv-offloading-size`` is GiB **in total** across the
TP x PP ranks, which vLLM divides among them.
"""

from __future__ import annotations

from runbook_runner.observe.launchflags import flag_values
from runbook_runner.observe.state import VllmLaunchConfig

_VALUED = {
    "--tensor-parallel-size": "tp_size",
    "-tp": "tp_size",
    "--pipeline-parallel-size": "pp_size",
    "-pp": "pp_size",
    "--cpu-offload-gb": "cpu_offload_gib",
    "--swap-space": "swap_space_gib",
    "--kv-offloading-size": "kv_offloading_gib",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--model": "model",
}
_TYPES = {
    "tp_size": int,
    "pp_size": int,
    "cpu_offload_gib": float,
    "swap_space_gib": float,
    "kv_offloading_gib": float,
    "gpu_memory_utilization": float,
    "model": str,
}


def parse_launch(text: str) -> VllmLaunchConfig:
    """The flags of one ``vllm serve`` (or ``python -m vllm.entrypoints...``) command."""
    _, values = flag_values(text.replace("\\\n", " "), _VALUED, _TYPES)
    return VllmLaunchConfig(**values)  # type: ignore[arg-type]
