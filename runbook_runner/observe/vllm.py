"""Parser for a vLLM launch command line: the flags that decide host memory use.

    vllm serve MODEL --tensor-parallel-size 8 --cpu-offload-gb 40 --kv-offloading-size 200

Both ``--flag value`` and ``--flag=value`` forms; ``-tp`` and ``-pp`` are the short forms of
``--tensor-parallel-size`` and ``--pipeline-parallel-size``. Flags not given are ``None``.
The scopes differ (vllm/config/cache.py, vllm/config/offload.py): ``--cpu-offload-gb`` and
``--swap-space`` are GiB **per GPU**; ``--kv-offloading-size`` is GiB **in total** across the
TP x PP ranks, which vLLM divides among them.
"""

from __future__ import annotations

import shlex

from runbook_runner.errors import ParseError
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
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as error:
        raise ParseError(f"the launch command does not split into words: {error}") from None
    values: dict[str, object] = {}
    for i, word in enumerate(words):
        flag, equals, inline = word.partition("=")
        if flag not in _VALUED:
            continue
        if equals:
            raw = inline
        elif i + 1 < len(words):
            raw = words[i + 1]
        else:
            raise ParseError(f"{flag} is missing its value")
        field = _VALUED[flag]
        try:
            values[field] = _TYPES[field](raw)
        except ValueError:
            raise ParseError(f"{flag} {raw!r}: expected {_TYPES[field].__name__}") from None
    return VllmLaunchConfig(**values)  # type: ignore[arg-type]
