"""A step's status, a run's outcome and a check's status are enums (runbook_runner/status.py):
the package compares and assigns them by name, never as a bare string that could drift
(``timed-out`` for ``timed_out``). The words themselves stay as the journal spells them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from runbook_runner.status import (
    SENT,
    STOPPING,
    CheckStatus,
    Condition,
    RunOutcome,
    StepStatus,
    Word,
)

PACKAGE = Path(__file__).resolve().parent.parent / "runbook_runner"

# The words as bare strings: each means a status, outcome or check status wherever the
# package compares with one or decides one.
WORDS = {
    *(s.value for s in StepStatus),
    *(o.value for o in RunOutcome),
    *(c.value for c in CheckStatus),
    "timed-out",  # the spelling that drifted
}
# Names whose value is a status: an assignment of a bare word to one of these is a hidden status.
STATUS_NAMES = ("status", "outcome", "verdict", "kind")
# Calls that take a step's status, and where.
STATUS_CALLS = {"StepRecord": 1, "record": 0}
# A comparison with a word that is not a status (file: why).
ALLOWED = {
    ("runbook.py", "empty"): "the runbook format's own word: 'empty: ok' on an observation",
    ("postmortem.py", "day"): "a postmortem's date when the journal has none, not a status",
    ("system_tools.py", "health"): "the simulated server's /health answer, not a check's status",
}


def _hidden(path: Path) -> list[str]:
    """Where a module compares with, collects, assigns or passes a bare status word."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []

    def word(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in WORDS

    def collection_words(node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            return [e for e in node.elts if word(e)]
        return [node] if word(node) else []

    def in_word_enum(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.ClassDef):
                return any(ast.unparse(base) in {"Word", "Enum", "str"} for base in node.bases)
        return False

    for node in ast.walk(tree):
        hits: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                hits += collection_words(operand)
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func).rpartition(".")[2]
            if name in {"frozenset", "set"} and node.args:
                hits += collection_words(node.args[0])
            if name in STATUS_CALLS and len(node.args) > STATUS_CALLS[name]:
                hits += collection_words(node.args[STATUS_CALLS[name]])
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = [ast.unparse(t).rpartition(".")[2].lower() for t in targets]
            if any(n.endswith(STATUS_NAMES) for n in named) and not in_word_enum(node):
                value = node.value
                branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                for branch in branches:
                    hits += collection_words(branch)
        for hit in hits:
            line = ast.get_source_segment(path.read_text(), parents.get(hit, hit)) or ""
            if any(path.name == file and marker in line for file, marker in ALLOWED):
                continue
            found.append(f"{path.name}:{hit.lineno}: {line[:100]!r}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_no_bare_status_word_is_compared_collected_or_assigned():
    hidden = [
        f"{path.parent.relative_to(PACKAGE.parent)}/{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _hidden(path)
    ]
    assert not hidden, "use runbook_runner.status's enums and sets:\n" + "\n".join(hidden)


def test_the_finder_sees_each_way_a_word_hides(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "if record.status == 'timed_out': pass\n"
        "stopping = frozenset({'failed', 'unknown'})\n"
        "outcome = 'interrupted' if x else 'finished'\n"
        "r = StepRecord('a', 'ok', 0, 0)\n"
        "x = {'ok': True}.get('ok')\n"  # a key named ok: not a status
    )
    assert [line.split(":")[1] for line in _hidden(module)] == ["1", "2", "2", "3", "3", "4"]


def test_the_words_are_those_the_journal_and_json_publish():
    assert (
        json.dumps([StepStatus.TIMED_OUT, CheckStatus.CANNOT_TELL])
        == '["timed_out", "cannot-tell"]'
    )
    assert f"{RunOutcome.NEEDS_CONFIRMATION}" == "needs-confirmation"
    assert Condition.TIMED_OUT == "timed-out"  # an observation's condition, a runbook's word
    assert "timed_out" in STOPPING
    assert "planned" not in SENT
    assert all(issubclass(kind, Word) for kind in (StepStatus, RunOutcome, CheckStatus))
