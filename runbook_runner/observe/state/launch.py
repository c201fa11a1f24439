"""A server's launch flags, read from its command line (SGLang, vLLM)."""

from __future__ import annotations

from dataclasses import dataclass

from runbook_runner.observe.state.fields import reported


@dataclass(frozen=True)
class LaunchConfig:
    """The memory-relevant flags of an ``sglang.launch_server`` command line (None: not given),
    and the ranks it puts on this host (observe/sizing.py: tp x pp x (dp unless DP
    attention) / nnodes; a layout it cannot count is a parse error)."""

    tp_size: int | None = reported("--tp-size")
    dp_size: int | None = reported("--dp-size")
    pp_size: int | None = reported("--pp-size")
    nnodes: int | None = reported("--nnodes")
    ep_size: int | None = reported("--ep-size")
    dp_attention: bool | None = reported("--enable-dp-attention")
    ranks_per_host: int | None = reported("the ranks on this host")
    ranks_how: str | None = reported("how the ranks are counted")
    hicache_host_memory_fraction: float | None = reported("--hicache-host-memory-fraction")
    hicache_enabled: bool | None = reported("--enable-hierarchical-cache")
    hicache_size_gb: int | None = reported("--hicache-size", "GB")
    hicache_ratio: float | None = reported("--hicache-ratio")
    mem_fraction_static: float | None = reported("--mem-fraction-static")
    speculative_algorithm: str | None = reported("--speculative-algorithm")
    attention_backend: str | None = reported("--attention-backend")
    model_path: str | None = reported("--model-path")

    def describe(self) -> str:
        return "the launch command"


@dataclass(frozen=True)
class VllmLaunchConfig:
    """The host-memory flags of a ``vllm serve`` command line (None: not given)."""

    tp_size: int | None = reported("--tensor-parallel-size")
    pp_size: int | None = reported("--pipeline-parallel-size")
    dp_size: int | None = reported("--data-parallel-size")
    dp_local: int | None = reported("--data-parallel-size-local")
    nnodes: int | None = reported("--nnodes")
    # The workers on this host (observe/sizing.py: tp x pp x dp / nnodes), and how counted.
    workers_per_host: int | None = reported("the workers on this host")
    workers_how: str | None = reported("how the workers are counted")
    # Host bytes per byte of --cpu-offload-gb where the launch says: 1 when it sets
    # VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1 (exact buffers); None: the runbook's budget.
    cpu_offload_factor: float | None = reported("host bytes per byte of --cpu-offload-gb")
    cpu_offload_gib: float | None = reported("--cpu-offload-gb", "GiB per GPU")
    swap_space_gib: float | None = reported("--swap-space", "GiB per GPU")
    kv_offloading_gib: float | None = reported("--kv-offloading-size", "GiB")
    kv_offloading_backend: str | None = reported("--kv-offloading-backend")
    # Which connector holds the KV offload ('native', 'simple', 'lmcache'; None: no offload),
    # and how many times this host holds --kv-offloading-size: once per data-parallel engine
    # on the default connector, once per worker on the simple one (observe/sizing.py); None
    # where the launch cannot tell (lmcache).
    kv_offload_path: str | None = reported("KV offload connector")
    kv_offload_copies: int | None = reported(
        "the copies of the KV offload on this host (under lmcache, LMCache sizes its own pool)"
    )
    # Host bytes per byte of --kv-offloading-size on that connector: 2 on the default one
    # (vLLM #53042), 1 on the simple one (exact pages); None under lmcache.
    kv_offload_factor: float | None = reported("host bytes per byte of --kv-offloading-size")
    gpu_memory_utilization: float | None = reported("--gpu-memory-utilization")
    model: str | None = reported("--model")

    def describe(self) -> str:
        return "the launch command"
