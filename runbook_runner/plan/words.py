"""The enum base whose members are the words the journal and --json spell."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """An enum whose members are the words the journal and --json spell."""

    def __str__(self) -> str:
        return str(self.value)
