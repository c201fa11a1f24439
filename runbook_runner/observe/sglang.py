"""Parser for an SGLang launch command line: the flags that decide memory use.

    python3 -m sglang.launch_server --model-path M --tp-size 8 --hicache-size 300 ...

Both ``--flag value`` and ``--flag=value`` forms; ``--tp`` is the short form of
``--tp-size`` and ``--dp`` of ``--dp-size``. Flags not given are ``None``, so
that a runbook can fall back to its parameters (``coalesce``).
"""

from __future__ import annotations

import dataclasses
import re

from runbook_runner.observe.launchflags import flag_values
from runbook_runner.observe.state import LaunchConfig

_VALUED = {
    "--tp-size": "tp_size",
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--dp-size": "dp_size",
    "--dp": "dp_size",
    "--hicache-size": "hicache_size_gb",
    "--hicache-ratio": "hicache_ratio",
    "--mem-fraction-static": "mem_fraction_static",
    "--model-path": "model_path",
    "--model": "model_path",
}
_TYPES = {
    "tp_size": int,
    "dp_size": int,
    "hicache_size_gb": float,
    "hicache_ratio": float,
    "mem_fraction_static": float,
    "model_path": str,
}


_LAUNCH_LINE = re.compile(
    r"(?:^|\s)-m\s+sglang\.launch_server(?:\s|$)|(?:^|[\s/])sglang\s+serve(?:\s|$)"
)


def parse_launch(text: str) -> LaunchConfig:
    """The flags of the first SGLang launch command in the text (a planned one given as a
    parameter, or ``ps -eo args`` of the host); no launch command gives an empty config
    (every field None: nothing is known). A launch without --tp-size runs one rank."""
    joined = text.replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if line.strip()]
    launches = [line for line in lines if _LAUNCH_LINE.search(line)]
    if len(lines) > 1 or (lines and not launches and "--" not in lines[0]):
        if not launches:
            return LaunchConfig()
        joined = launches[0]
    config = _flags(joined)
    if joined.strip() and config.tp_size is None and launches:
        config = dataclasses.replace(config, tp_size=1)
    return config


def _flags(text: str) -> LaunchConfig:
    words, values = flag_values(text, _VALUED, _TYPES)
    if any(word.partition("=")[0] == "--enable-hierarchical-cache" for word in words):
        values["hicache_enabled"] = True
    return LaunchConfig(**values)  # type: ignore[arg-type]
