"""The run journal keeps no character of the host's text that a terminal would obey: U+202E
(right-to-left override) and U+009B (C1 CSI) are written as JSON escapes, as the terminal
shows them escaped (safetext.visible), and read back unchanged."""

from __future__ import annotations

import json

from runbook_runner.journal import Journal, read
from runbook_runner.journal.lines import Line

HOST_TEXT = "gpu\u202e0 pmet\x9b2J\x7f \u2066x\u2069 \ufeffend\x1b[31m"


def test_host_text_in_the_journal_is_escaped_and_reads_back_the_same(tmp_path):
    path = tmp_path / "run.jsonl"
    journal = Journal(path)
    journal.append(Line("observation", {"stdout": HOST_TEXT}))
    journal.close()
    raw = path.read_bytes()
    for char in ("\u202e", "\x9b", "\x7f", "\u2066", "\u2069", "\ufeff", "\x1b"):
        assert char.encode() not in raw
    assert b"\\u202e" in raw
    assert b"\\u009b" in raw
    assert json.loads(raw)["stdout"] == HOST_TEXT
    assert read(path).events[0]["stdout"] == HOST_TEXT
