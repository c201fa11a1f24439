"""A server's launch flags, read from its command line (SGLang, vLLM)."""

from __future__ import annotations

from dataclasses import dataclass

from runbook_runner.observe.state.fields import reported


@dataclass(frozen=True)
class LaunchConfig:
    """The memory-relevant flags of an ``sglang.launch_server`` command line (None: not given)."""

    tp_size: int | None = reported("--tp-size")
    dp_size: int | None = reported("--dp-size")
    hicache_enabled: bool | None = reported("--enable-hierarchical-cache")
    hicache_size_gb: float | None = reported("--hicache-size", "GB")
    hicache_ratio: float | None = reported("--hicache-ratio")
    mem_fraction_static: float | None = reported("--mem-fraction-static")
    model_path: str | None = reported("--model-path")

    def describe(self) -> str:
        return "the launch command"


@dataclass(frozen=True)
class VllmLaunchConfig:
    """The host-memory flags of a ``vllm serve`` command line (None: not given)."""

    tp_size: int | None = reported("--tensor-parallel-size")
    pp_size: int | None = reported("--pipeline-parallel-size")
    cpu_offload_gib: float | None = reported("--cpu-offload-gb", "GiB per GPU")
    swap_space_gib: float | None = reported("--swap-space", "GiB per GPU")
    kv_offloading_gib: float | None = reported("--kv-offloading-size", "GiB")
    kv_offloading_backend: str | None = reported("--kv-offloading-backend")
    # Which connector holds the KV offload ('native', 'simple', 'lmcache'; None: no offload),
    # and how many times the host pins --kv-offloading-size: 0 once in total (vLLM splits it
    # among the workers), 1 once per worker; None where the launch cannot tell (lmcache).
    kv_offload_path: str | None = reported("KV offload connector")
    kv_offload_each_worker: int | None = reported(
        "the KV offload per worker (under lmcache, LMCache sizes its own pool)"
    )
    gpu_memory_utilization: float | None = reported("--gpu-memory-utilization")
    model: str | None = reported("--model")

    def describe(self) -> str:
        return "the launch command"
