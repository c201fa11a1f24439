"""Parser for an SGLang launch command line: the flags that decide memory use.

    python3 -m sglang.launch_server --model-path M --tp-size 8 --hicache-size 300 ...

Both ``--flag value`` and ``--flag=value`` forms; ``--tp`` is the short form of
``--tp-size``, ``--dp`` of ``--dp-size``, ``--pp`` of ``--pp-size`` (and the long
``--tensor-/--data-/--pipeline-parallel-size`` spellings). Flags not given are ``None``, so
that a runbook can fall back to its parameters (``coalesce``).

The ranks the launch puts on this host are counted as the server counts them
(observe/sizing.py): ``tp x pp x (dp unless --enable-dp-attention) / nnodes``; a layout
that rule cannot count is a parse error that says why (a check over it cannot tell). So is
a launch whose ranks pin host pools besides ``--hicache-size`` that no flag sizes
(a speculative draft, a DSA indexer, hybrid SWA or Mamba state: ``sizing.sglang_extra_pools``).
``--hicache-size`` is a whole number of GB; ``0`` (SGLang's default) means "use the ratio",
so it reads as not given.

The text is either a launch command alone, ``ps -eo args`` of a host (the first SGLang
launch among its lines), or both: a first line ``launch: COMMAND`` (the planned launch a
runbook was given; empty when none) followed by ``ps`` output. A planned launch wins over
the running server; one that is another server's (``vllm serve``) is refused by name, never
silently replaced by what ``ps`` shows.
"""

from __future__ import annotations

import dataclasses
import re

from runbook_runner.errors import ParseError
from runbook_runner.observe import sizing
from runbook_runner.observe.launchflags import flag_values
from runbook_runner.observe.state import LaunchConfig

_VALUED = {
    "--tp-size": "tp_size",
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--dp-size": "dp_size",
    "--dp": "dp_size",
    "--data-parallel-size": "dp_size",
    "--pp-size": "pp_size",
    "--pp": "pp_size",
    "--pipeline-parallel-size": "pp_size",
    "--nnodes": "nnodes",
    "--ep-size": "ep_size",
    "--ep": "ep_size",
    "--expert-parallel-size": "ep_size",
    "--hicache-size": "hicache_size_gb",
    "--hicache-ratio": "hicache_ratio",
    "--hicache-host-memory-fraction": "hicache_host_memory_fraction",
    "--mem-fraction-static": "mem_fraction_static",
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-algo": "speculative_algorithm",
    "--attention-backend": "attention_backend",
    "--model-path": "model_path",
    "--model": "model_path",
}
_TYPES = {
    "tp_size": int,
    "dp_size": int,
    "pp_size": int,
    "nnodes": int,
    "ep_size": int,
    "hicache_size_gb": int,
    "hicache_ratio": float,
    "hicache_host_memory_fraction": float,
    "mem_fraction_static": float,
    "speculative_algorithm": str,
    "attention_backend": str,
    "model_path": str,
}


_LAUNCH_LINE = re.compile(
    r"(?:^|\s)-m\s+sglang\.launch_server(?:\s|$)|(?:^|[\s/])sglang\s+serve(?:\s|$)"
)
# Another server's launch: handed to the SGLang preflight, it is refused, not read.
_OTHER_SERVER = re.compile(
    r"(?:^|[\s/])vllm\s+serve(?:\s|$)|(?:^|\s)-m\s+vllm\.entrypoints|"
    r"(?:^|[\s/])trtllm-serve(?:\s|$)|(?:^|\s)-m\s+tensorrt_llm"
)
PLANNED = "launch:"


def parse_launch(text: str) -> LaunchConfig:
    """The flags of the planned launch, or of the first SGLang launch command in the text
    (``ps -eo args`` of the host); no launch command gives an empty config (every field
    None: nothing is known). A launch without --tp-size runs one rank."""
    lines = text.replace("\\\n", " ").splitlines()
    if lines and lines[0].startswith(PLANNED):
        planned = lines[0][len(PLANNED) :].strip()
        if planned:
            return _planned(planned)
        lines = lines[1:]
    return _from_lines([line for line in lines if line.strip()])


def _planned(command: str) -> LaunchConfig:
    if _OTHER_SERVER.search(command) and not _LAUNCH_LINE.search(command):
        raise ParseError(
            "the launch given is not SGLang's (it starts another server, e.g. vllm serve): "
            "check it with vllm-offload-preflight"
        )
    return _counted(_flags(command), launched=True)


def _from_lines(lines: list[str]) -> LaunchConfig:
    launches = [line for line in lines if _LAUNCH_LINE.search(line)]
    if len(lines) > 1 or (lines and not launches and "--" not in lines[0]):
        if not launches:
            return LaunchConfig()
        return _counted(_flags(launches[0]), launched=True)
    if not lines:
        return LaunchConfig()
    if _OTHER_SERVER.search(lines[0]) and not launches:
        raise ParseError(
            "the launch given is not SGLang's (it starts another server, e.g. vllm serve): "
            "check it with vllm-offload-preflight"
        )
    return _counted(_flags(lines[0]), launched=bool(launches))


def _counted(config: LaunchConfig, launched: bool) -> LaunchConfig:
    """The config with its ranks on this host; a launch command without --tp-size runs
    one rank, a bare list of flags without it says nothing of the ranks."""
    if config.tp_size is None and launched:
        config = dataclasses.replace(config, tp_size=1)
    if config.tp_size is None:
        return config
    ranks = sizing.sglang_ranks(
        config.tp_size, config.pp_size, config.dp_size, bool(config.dp_attention), config.nnodes
    )
    if ranks.count is None:
        raise ParseError(f"the ranks on this host cannot be counted: {ranks.how}: {ranks.why}")
    pools = sizing.sglang_extra_pools(
        config.speculative_algorithm, config.model_path, config.attention_backend
    )
    if pools:
        named = "; ".join(f"{pool.value} ({pool.source.url})" for pool in pools)
        raise ParseError(
            f"each of the {ranks.count} ranks also pins {named}, beside --hicache-size and "
            "sized by the model's layers: how much host memory the launch takes cannot be told"
        )
    return dataclasses.replace(config, ranks_per_host=ranks.count, ranks_how=ranks.how)


def _flags(text: str) -> LaunchConfig:
    words, values = flag_values(text, _VALUED, _TYPES)
    flags = {word.partition("=")[0] for word in words}
    if "--enable-hierarchical-cache" in flags:
        values["hicache_enabled"] = True
    if "--enable-dp-attention" in flags:
        values["dp_attention"] = True
    if values.get("hicache_size_gb") == 0:  # SGLang's default: size by --hicache-ratio
        del values["hicache_size_gb"]
    return LaunchConfig(**values)  # type: ignore[arg-type]
