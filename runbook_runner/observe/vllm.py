"""Parser for a vLLM launch command line: the flags that decide host memory use.

    VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve MODEL --tensor-parallel-size 8 \\
        --kv-offloading-backend native --kv-offloading-size 200

Both ``--flag value`` and ``--flag=value`` forms, and vLLM's underscore spellings
(``--kv_offloading_size``); ``-tp`` and ``-pp`` are the short forms of
``--tensor-parallel-size`` and ``--pipeline-parallel-size``. Flags not given are ``None``.

The scopes differ, and for ``--kv-offloading-size`` they depend on the path (read in vLLM's
source; the links are in docs/pitfalls/vllm-lmcache-offload.md):

- ``--cpu-offload-gb`` offloads model *weights*, GiB **per GPU**, as a ceiling
  (vllm/config/offload.py); ``--swap-space`` (legacy) is GiB per GPU. The offloaded weights
  are pinned through PyTorch's caching host allocator, which rounds each tensor up to a
  power of two (vLLM #56410 measures ~1.9x): the preflight budgets up to 2x; a launch that
  sets ``VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1`` (exact buffers) gives
  ``cpu_offload_factor = 1``.
- The workers on this host are ``tp x pp x dp / nnodes`` (``--data-parallel-size-local``,
  when given, is the engines on this host): ``workers_per_host``.
- ``--kv-offloading-size`` with the default connector (backend ``native``): one **engine's**
  total, which vLLM divides among that engine's TP x PP workers
  (vllm/v1/kv_offload/cpu/spec.py divides by ``parallel_config.world_size``, which has no
  DP factor), so every data-parallel engine on the host holds it again, each in its own
  /dev/shm file: ``kv_offload_copies`` is the engines on this host.
- The same with ``VLLM_USE_SIMPLE_KV_OFFLOAD=1`` (the SimpleCPUOffloadConnector): builds
  before the connector divided by the world size gave **each worker the whole value**; the
  launch line does not say which build runs, so the worst case is taken:
  ``kv_offload_copies`` is the workers on this host.
- ``--kv-offloading-backend lmcache``: older builds give each worker value / (TP x PP) as
  LMCache's ``max_local_cpu_size`` (GiB); newer ones start LMCache's multi-process connector
  and do not pass the size at all (LMCache's own server sizes its pool). The launch cannot
  tell: ``kv_offload_copies = None``, and a check over it cannot tell either.

The environment variable counts when it is written on the launch line (``VAR=1 vllm serve``,
``env VAR=1 ...``, ``export VAR=1; ...``); one set elsewhere (a systemd unit, a shell
profile) is not seen.
"""

from __future__ import annotations

import re

from runbook_runner.errors import ParseError
from runbook_runner.observe import sizing
from runbook_runner.observe.launchflags import flag_values
from runbook_runner.observe.state import VllmLaunchConfig

_VALUED = {
    "--tensor-parallel-size": "tp_size",
    "--tensor_parallel_size": "tp_size",
    "-tp": "tp_size",
    "--pipeline-parallel-size": "pp_size",
    "--pipeline_parallel_size": "pp_size",
    "-pp": "pp_size",
    "--data-parallel-size": "dp_size",
    "--data_parallel_size": "dp_size",
    "-dp": "dp_size",
    "--data-parallel-size-local": "dp_local",
    "--data_parallel_size_local": "dp_local",
    "-dpl": "dp_local",
    "--nnodes": "nnodes",
    "--cpu-offload-gb": "cpu_offload_gib",
    "--cpu_offload_gb": "cpu_offload_gib",
    "--swap-space": "swap_space_gib",
    "--swap_space": "swap_space_gib",
    "--kv-offloading-size": "kv_offloading_gib",
    "--kv_offloading_size": "kv_offloading_gib",
    "--kv-offloading-backend": "kv_offloading_backend",
    "--kv_offloading_backend": "kv_offloading_backend",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--gpu_memory_utilization": "gpu_memory_utilization",
    "--model": "model",
}
_TYPES = {
    "tp_size": int,
    "pp_size": int,
    "dp_size": int,
    "dp_local": int,
    "nnodes": int,
    "cpu_offload_gib": float,
    "swap_space_gib": float,
    "kv_offloading_gib": float,
    "kv_offloading_backend": str,
    "gpu_memory_utilization": float,
    "model": str,
}
SIMPLE_ENV = "VLLM_USE_SIMPLE_KV_OFFLOAD"
# The documented workaround for --cpu-offload-gb's rounding (vLLM #56410, PR #32993):
# offloaded weights in exact-size pinned buffers (cudaHostAlloc, vLLM #58178), not through
# PyTorch's rounding allocator.
EXACT_PIN_ENV = "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY"
_TRUE = {"1", "true", "yes", "on"}


def env_set(words: list[str], name: str) -> bool:
    """Whether the launch line sets the variable to a true value (the last setting wins)."""
    pattern = re.compile(rf"^{name}=(.*)$")
    value = False
    for word in words:
        match = pattern.match(word.rstrip(";"))
        if match:
            value = match.group(1).strip().lower() in _TRUE
    return value


def simple_offload(words: list[str]) -> bool:
    """Whether the launch line sets VLLM_USE_SIMPLE_KV_OFFLOAD to a true value (last wins)."""
    return env_set(words, SIMPLE_ENV)


def kv_offload_path(backend: str | None, size: float | None, simple: bool) -> str | None:
    """The connector that holds --kv-offloading-size: 'native', 'simple', 'lmcache', or None."""
    if size is None:
        return None
    if backend == "lmcache":
        return "lmcache"
    # No backend given: the default is 'native' on the builds that have the flag's default.
    return "simple" if simple else "native"


def _int(values: dict[str, object], name: str) -> int | None:
    value = values.get(name)
    return value if isinstance(value, int) else None


def parse_launch(text: str) -> VllmLaunchConfig:
    """The flags of one ``vllm serve`` (or ``python -m vllm.entrypoints...``) command."""
    words, values = flag_values(text.replace("\\\n", " "), _VALUED, _TYPES)
    backend = values.get("kv_offloading_backend")
    size = values.get("kv_offloading_gib")
    path = kv_offload_path(
        backend if isinstance(backend, str) else None,
        size if isinstance(size, float) else None,
        simple_offload(words),
    )
    values["kv_offload_path"] = path
    values["kv_offload_factor"] = sizing.KV_OFFLOAD_FACTOR.get(path) if path else None
    if env_set(words, EXACT_PIN_ENV):  # else the runbook's budget (up to 2x) holds
        values["cpu_offload_factor"] = sizing.cpu_offload_factor(exact_pins=True)

    here = 1  # no launch: the runbook's parameters give one engine
    if words:  # a launch given: its layout, vLLM's defaults for what it does not say
        workers = sizing.vllm_workers(
            _int(values, "tp_size"),
            _int(values, "pp_size"),
            _int(values, "dp_size"),
            _int(values, "nnodes"),
            _int(values, "dp_local"),
        )
        if workers.count is None:
            raise ParseError(
                f"the workers on this host cannot be counted: {workers.how}: {workers.why}"
            )
        here = values["workers_per_host"] = workers.count
        values["workers_how"] = workers.how
    values["kv_offload_copies"] = sizing.vllm_kv_copies(
        path, here, _int(values, "tp_size"), _int(values, "pp_size")
    )
    return VllmLaunchConfig(**values)  # type: ignore[arg-type]
