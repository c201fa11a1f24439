"""How many host-memory pools a launch makes on one host, and how many bytes each pins: the
rules the two preflights and the sizing calculator share. Pure: numbers in, numbers out.

Every rule names the upstream file (at a commit) or report it is read from
(:data:`SOURCES`); docs/calculator.md and docs/pitfalls/per-rank-vs-total.md show the same
links. The calculator (docs/assets/javascripts/sizing.js) does this arithmetic in the
browser; tests/test_sizing.py runs this module, the preflights' expressions and the page's
JavaScript on one table of cases (tests/fixtures/sizing/cases.yaml) and fails where they
differ.

SGLang: the ranks on one host
    ``tp x pp x (dp unless --enable-dp-attention) / nnodes``. Each rank builds its own host
    pool: every pipeline stage allocates the whole ``--hicache-size``
    (``sync_fixed_hicache_size`` makes the stages agree on the *token* capacity, not share
    one pool), and data-parallel replicas without DP attention are whole servers with their
    own pools. With ``--enable-dp-attention`` the DP groups are carved out of the TP ranks
    (``dp`` divides ``tp``), so ``dp`` adds no rank. ``--ep-size`` shards the experts over
    the same ranks: it adds none and changes no host pool. A count that does not divide
    evenly by ``nnodes``, or a DP size that does not divide TP under DP attention, is one
    the server would refuse or lay out in a way this rule does not know: cannot tell
    (``None``).

SGLang: the pools a rank pins besides ``--hicache-size``
    ``--hicache-size`` sizes the target model's KV host pool only. A speculative-decoding
    draft model (``--speculative-algorithm``) gets host pools of its own, packed after the
    target's or beside it (:data:`SOURCES` ``sglang-draft-pools``); a DSA model (DeepSeek
    V3.2, GLM-5) adds an indexer host pool, about 23% more per rank on GLM-5.2
    (``sglang-dsa-indexer``); hybrid models add SWA or Mamba state pools on some builds
    (``sglang-hybrid-pools``). Their size depends on the model's layers, which the launch
    line does not show: :func:`sglang_extra_pools` names them, and a preflight over such a
    launch cannot tell (never "fits").

vLLM: the workers on one host
    ``tp x pp`` per engine, times ``dp`` engines, over ``nnodes`` hosts. ``--cpu-offload-gb``
    is GiB of weights per worker, pinned through PyTorch's caching host allocator, which
    rounds each tensor up to a power of two: open reports measure about 1.9x, so it is
    budgeted at up to :data:`PINNED_ROUNDING` unless the launch sets
    ``VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1`` (exact-size pinned buffers from
    ``cudaHostAlloc`` instead of the rounding allocator). ``--kv-offloading-size`` is one
    engine's total: vLLM divides it over that engine's ``tp x pp`` workers
    (``parallel_config.world_size`` has no DP factor), so every data-parallel engine on the
    host holds it again (:func:`vllm_kv_copies`). It pins up to 2x on the default connector
    (vLLM #53042: the same rounding), exactly on the simple connector (it registers pages
    with ``cudaHostRegister``; counted once per worker, builds before it divided), and is
    LMCache's to size under ``lmcache``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

# Up to this many host bytes per byte asked, where PyTorch's pinned allocator rounds each
# tensor up to the next power of two (a tensor just over a power of two takes twice it).
PINNED_ROUNDING = 2.0


@dataclass(frozen=True)
class Source:
    """One upstream file at a commit, or one report, that a rule is read from."""

    claim: str
    url: str


SOURCES: dict[str, Source] = {
    "sglang-pp-pools": Source(
        "Each pipeline stage builds its own host pool of --hicache-size GB; "
        "sync_fixed_hicache_size only makes the stages agree on the token capacity",
        "https://github.com/sgl-project/sglang/blob/712c06178f7f56e9f8d10b011ff4312f1270f8cf/"
        "python/sglang/srt/mem_cache/pool_host/base.py",
    ),
    "sglang-dp-replicas": Source(
        "Without --enable-dp-attention, --dp-size starts that many whole servers, each with "
        "--tp-size x --pp-size ranks and its own pools; with it, the DP groups are TP ranks",
        "https://github.com/sgl-project/sglang/blob/fdd9edee7a8faeaeeef5d0f77af7a673b4c06297/"
        "python/sglang/srt/managers/data_parallel_controller.py",
    ),
    "sglang-per-rank-size": Source(
        "--hicache-size is GB (10^9 bytes) for each rank; --hicache-ratio multiplies the "
        "rank's device KV pool",
        "https://github.com/sgl-project/sglang/blob/2232873a/docs/advanced_features/"
        "hicache_design.md",
    ),
    "sglang-guard": Source(
        "Each rank checks its own pool against available - 10 GiB (per rank, not per host)",
        "https://github.com/sgl-project/sglang/blob/712c06178f7f56e9f8d10b011ff4312f1270f8cf/"
        "python/sglang/srt/mem_cache/pool_host/base.py",
    ),
    "sglang-host-guard": Source(
        "A per-host guard: the ranks of a host together against its available memory",
        "https://github.com/sgl-project/sglang/pull/35540",
    ),
    "sglang-auto-size": Source(
        "With neither --hicache-size nor --hicache-ratio, --hicache-host-memory-fraction "
        "(default 0.8) sizes the pools of all ranks from the host's available memory; an "
        "explicit size or ratio turns it off",
        "https://github.com/sgl-project/sglang/pull/40135",
    ),
    "sglang-guard-refuses": Source(
        "The guard refuses, intermittently, pools that fit (each pool re-sampled available "
        "memory while sibling ranks were pinning theirs, as PR #40135 describes)",
        "https://github.com/sgl-project/sglang/issues/38156",
    ),
    "sglang-dsa-indexer": Source(
        "A DSA model's indexer host pool is allocated beside --hicache-size: GLM-5.2 at TP 4 "
        "with --hicache-size 150 pinned 150 GB of KV and about 34.4 GB of indexer per rank",
        "https://github.com/sgl-project/sglang/pull/29263",
    ),
    "sglang-draft-pools": Source(
        "--hicache-size sizes the target KV host pool; DSA indexer and speculative draft "
        "host pools allocate outside that limit",
        "https://github.com/sgl-project/sglang/pull/30581",
    ),
    "sglang-hybrid-pools": Source(
        "On hybrid Mamba models --hicache-size N gave the Mamba host pool N GB as well as the "
        "KV pool: 2N GB per rank (Qwen3.5); fixed for SWA in PR #32373, for Mamba in #32915",
        "https://github.com/sgl-project/sglang/issues/29034",
    ),
    "sglang-hybrid-swa-fix": Source(
        "Hybrid SWA models allocated about 2x host memory under --hicache-size until "
        "--hicache-size became one budget split over the pools",
        "https://github.com/sgl-project/sglang/pull/32373",
    ),
    "vllm-cpu-offload-rounding": Source(
        "--cpu-offload-gb uses about 1.9x the host memory it asks for (the pinned allocator "
        "rounds to a power of two); workaround VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1",
        "https://github.com/vllm-project/vllm/issues/56410",
    ),
    "vllm-cpu-offload-oom": Source(
        "--cpu-offload-gb 305 used about 504 GiB and was OOM-killed mid-load (UVAOffloader "
        "pins with Tensor.pin_memory())",
        "https://github.com/vllm-project/vllm/issues/58178",
    ),
    "vllm-cpu-offload-exact": Source(
        "Exact-size pinned buffers for the UVA offloader (open: not in a release yet)",
        "https://github.com/vllm-project/vllm/pull/58185",
    ),
    "vllm-disable-pin": Source(
        "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY: offload without PyTorch's pinned memory",
        "https://github.com/vllm-project/vllm/pull/32993",
    ),
    "vllm-kv-rounding": Source(
        "--kv-offloading-size on the default connector pins about 1.92x (the same rounding)",
        "https://github.com/vllm-project/vllm/issues/53042",
    ),
    "vllm-kv-per-engine": Source(
        "--kv-offloading-size is one engine's total: CPUOffloadingSpec divides it by "
        "parallel_config.world_size (TP x PP, no DP factor), so each DP engine holds it",
        "https://github.com/vllm-project/vllm/blob/0072b0b7443bdddf17824c78d4feae8e1fc12fb4/"
        "vllm/v1/kv_offload/cpu/spec.py",
    ),
    "vllm-kv-file-per-engine": Source(
        "Each DP engine creates its own /dev/shm/vllm_offload_*_dpN.mmap file",
        "https://github.com/vllm-project/vllm/issues/44888",
    ),
    "vllm-simple-exact": Source(
        "The simple connector registers its pages with cudaHostRegister: exact sizes",
        "https://github.com/vllm-project/vllm/blob/02f250b03f38822ccdb63f27a3005d10ca81f385/"
        "vllm/v1/simple_kv_offload/worker.py",
    ),
}


@dataclass(frozen=True)
class Ranks:
    """The ranks (processes, each with its own host pool) a launch puts on one host, and how
    they were counted; ``count`` is None where the rule cannot tell, and ``why`` says why."""

    count: int | None
    how: str
    why: str = ""


def _size(value: int | None) -> int:
    return 1 if value is None else value


def sglang_ranks(
    tp: int | None,
    pp: int | None = None,
    dp: int | None = None,
    dp_attention: bool = False,
    nnodes: int | None = None,
) -> Ranks:
    """SGLang's ranks on one host: tp x pp x (dp unless --enable-dp-attention) / nnodes."""
    tp_, pp_, dp_, nodes = _size(tp), _size(pp), _size(dp), _size(nnodes)
    replicas = 1 if dp_attention else dp_
    how = (
        f"--tp-size {tp_} × --pp-size {pp_} × --dp-size {dp_}"
        + (" (DP attention: within TP)" if dp_attention else "")
        + f" / --nnodes {nodes}"
    )
    if min(tp_, pp_, dp_, nodes) < 1:
        return Ranks(None, how, "a size below 1 is no layout SGLang starts")
    if dp_attention and tp_ % dp_:
        return Ranks(None, how, "with --enable-dp-attention, --dp-size must divide --tp-size")
    world = tp_ * pp_ * replicas
    if world % nodes:
        return Ranks(None, how, f"{world} ranks do not divide evenly over {nodes} nodes")
    return Ranks(world // nodes, how)


def vllm_workers(
    tp: int | None,
    pp: int | None = None,
    dp: int | None = None,
    nnodes: int | None = None,
    dp_local: int | None = None,
) -> Ranks:
    """vLLM's workers on one host: tp x pp per engine, x dp engines, / nnodes; with
    --data-parallel-size-local, that many engines on this host."""
    tp_, pp_, dp_, nodes = _size(tp), _size(pp), _size(dp), _size(nnodes)
    how = f"--tensor-parallel-size {tp_} × --pipeline-parallel-size {pp_}"
    if dp_local is not None:
        how += f" × --data-parallel-size-local {dp_local}"
        if min(tp_, pp_, dp_local) < 1:
            return Ranks(None, how, "a size below 1 is no layout vLLM starts")
        return Ranks(tp_ * pp_ * dp_local, how)
    how += f" × --data-parallel-size {dp_}"
    if nodes != 1:
        how += f" / --nnodes {nodes}"
    if min(tp_, pp_, dp_, nodes) < 1:
        return Ranks(None, how, "a size below 1 is no layout vLLM starts")
    world = tp_ * pp_ * dp_
    if world % nodes:
        return Ranks(None, how, f"{world} workers do not divide evenly over {nodes} nodes")
    return Ranks(world // nodes, how)


def cpu_offload_factor(exact_pins: bool) -> float:
    """Host bytes to budget per byte of --cpu-offload-gb: exact when the launch turns the
    pinned allocator off (VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1), else up to 2x."""
    return 1.0 if exact_pins else PINNED_ROUNDING


def vllm_kv_copies(path: str | None, workers: int, tp: int | None, pp: int | None) -> int | None:
    """How many times this host holds --kv-offloading-size: once per data-parallel engine on
    the default connector (vLLM divides it over one engine's tp x pp workers only; an
    engine spread over hosts still sizes each host's region for the whole value), once per
    worker on the simple one (builds before it divided), None under LMCache (its pool)."""
    if path is None:  # no KV offload, or the runbook's parameters: one engine
        return 1
    if path == "lmcache":
        return None
    if path == "simple":
        return workers
    return max(1, workers // (_size(tp) * _size(pp)))


# Host bytes per byte of --kv-offloading-size, by connector: the default (native) connector
# pins through the rounding allocator; the simple one registers exact pages; None: LMCache's.
KV_OFFLOAD_FACTOR: dict[str, float | None] = {
    "native": PINNED_ROUNDING,
    "simple": 1.0,
    "lmcache": None,
}


class ExtraPool(enum.Enum):
    """A host pool an SGLang rank pins besides --hicache-size, whose size the launch line
    does not give (it depends on the model's layers)."""

    DRAFT = "speculative-decoding draft pools"
    DSA_INDEXER = "the DSA indexer pool"
    HYBRID = "hybrid SWA or Mamba state pools"

    @property
    def source(self) -> Source:
        return SOURCES[_EXTRA_POOL_SOURCE[self]]


_EXTRA_POOL_SOURCE = {
    ExtraPool.DRAFT: "sglang-draft-pools",
    ExtraPool.DSA_INDEXER: "sglang-dsa-indexer",
    ExtraPool.HYBRID: "sglang-hybrid-pools",
}

# Model names (lower case, without '-', '_', '.' or '/') that carry a DSA indexer or hybrid
# state pools; a model not named here is counted as a plain KV pool. The DSA family is
# DeepSeek V3.2 and GLM-5 (sglang PR #29263); the hybrid one the Qwen3.5/3.6 and Qwen3-Next
# GatedDeltaNet models, Kimi-K3, Nemotron-H, Jamba, Falcon-H1 (#29034, PR #32915), and
# models with sliding-window pools (PR #32373), as gpt-oss and DeepSeek V4 (PR #30393).
_DSA_MODELS = ("deepseekv32", "glm5")
_HYBRID_MODELS = (
    "qwen35",
    "qwen36",
    "qwen3next",
    "kimik3",
    "nemotronh",
    "jamba",
    "falconh1",
    "mamba",
    "gptoss",
    "deepseekv4",
)
_DSA_BACKENDS = {"dsa", "nsa", "dsv4", "compressed"}


def sglang_extra_pools(
    speculative_algorithm: str | None, model_path: str | None, attention_backend: str | None
) -> tuple[ExtraPool, ...]:
    """The host pools besides --hicache-size that this launch makes each rank pin."""
    name = re.sub(r"[-_./\s]", "", (model_path or "").lower())
    pools = []
    if speculative_algorithm:
        pools.append(ExtraPool.DRAFT)
    if any(m in name for m in _DSA_MODELS) or (attention_backend or "") in _DSA_BACKENDS:
        pools.append(ExtraPool.DSA_INDEXER)
    if any(m in name for m in _HYBRID_MODELS):
        pools.append(ExtraPool.HYBRID)
    return tuple(pools)


@dataclass(frozen=True)
class Version:
    """One SGLang change that moves the preflight's answer, and what the preflight does."""

    change: str
    source: str
    preflight: str


# SGLang's own guard and auto-size over its versions (newest last).
SGLANG_VERSIONS: tuple[Version, ...] = (
    Version(
        "Each rank checks its own pool against available - 10 GiB",
        SOURCES["sglang-guard"].url,
        "the preflight adds the ranks of the host together: the guard does not",
    ),
    Version(
        "A per-host guard (the ranks of a host together)",
        SOURCES["sglang-host-guard"].url,
        "SGLang refuses the launch itself; the preflight still says so before it starts",
    ),
    Version(
        "The guard refuses, now and then, pools that fit: each rank samples available memory "
        "while its siblings pin theirs (fix proposed in PR #38157)",
        SOURCES["sglang-guard-refuses"].url,
        "the preflight's verdict is the arithmetic, not the guard's; a refusal on a launch "
        "the preflight passes is this report, not a bad size",
    ),
    Version(
        "--hicache-host-memory-fraction: with neither a size nor a ratio, the pools of all "
        "ranks are sized from the host's available memory (default 0.8 of it)",
        SOURCES["sglang-auto-size"].url,
        "a launch without --hicache-size or --hicache-ratio is checked at the old default "
        "ratio (2.0); later builds fit the ratio to the host and may grow it up to 8.0, so "
        "give the ratio to check the launch as it runs",
    ),
    Version(
        "DSA indexer and speculative draft host pools are allocated outside --hicache-size",
        SOURCES["sglang-draft-pools"].url,
        "a launch with --speculative-algorithm, a DSA model or a hybrid model: cannot tell",
    ),
)
