"""What connecting tells and asks its caller: notices, a host key it recorded, a passphrase."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import paramiko

PassphrasePrompt = Callable[[str], str | None]
Notice = Callable[[str], None]
Recorded = Callable[[str, paramiko.PKey], None]


@dataclass
class Hooks:
    passphrase_prompt: PassphrasePrompt | None
    on_record: Recorded
    on_notice: Notice
