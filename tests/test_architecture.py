"""The package's import graph: data flows one way, and no module needs itself to load.

Read from the source with ``ast``: every ``import`` counts, at the top of a module, in a
function, or under ``if TYPE_CHECKING`` (a type-only import is still a dependency, so it
counts for the layers; it does not run, so it does not make a load-order cycle).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "runbook_runner"

# The rooms, bottom to top. A room imports only rooms of lower layers (and itself). Rooms
# that share a layer do not import one another, except where the layer is one room in two
# files (SHARED). A new top-level module or package must be placed here.
LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: the version, errors, exit codes, the status words, text escaping, file reads
    ("runbook_runner", "errors", "exitcodes", "status", "safetext", "localfile"),
    ("observe",),  # pure: host text -> typed state
    ("format", "runbook"),  # pure: YAML -> the runbook model (runbook.py is what format loads)
    ("expect",),  # pure: checks over typed state
    ("plan",),  # pure: ownership and the step decision
    ("commandresult",),  # what a command gave back (no I/O; no paramiko at import)
    ("ssh",),  # I/O: OpenSSH's configuration, connecting, host keys, the host lock
    ("transport",),  # I/O: one connection, commands as results
    ("local", "events"),  # this machine as a host; what a run reports as it goes
    ("journal",),  # the run's durable record, its schema and the resume plan
    ("engine", "fleet", "kb", "simhost"),  # the engine; fleets; knowledge; sim
    ("session",),  # one run on one host: journal, lock, consent, run, release, outcome
    ("cli",),  # argv -> requests; prints outcomes; exit codes
    ("__main__",),
)
SHARED = {("format", "runbook")}  # one layer that is one room in two places
PURE = {"observe", "format", "expect", "plan"}
IO = {
    "localfile",
    "ssh",
    "transport",
    "local",
    "journal",
    "engine",
    "session",
    "fleet",
    "kb",
    "simhost",
    "cli",
    "__main__",
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (or the package, for a name from its __init__)
    line: int
    type_only: bool


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def imports() -> list[Import]:
    modules = _modules()
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        typed = _type_checking_lines(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    name = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    name = node.module or ""
                names = [
                    f"{name}.{alias.name}" if f"{name}.{alias.name}" in modules else name
                    for alias in node.names
                ]
            for name in names:
                if name == "runbook_runner" or name.startswith("runbook_runner."):
                    found.append(Import(module, name, node.lineno, node.lineno in typed))
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(name: str) -> int:
    for index, rooms in enumerate(LAYERS):
        if name in rooms:
            return index
    raise AssertionError(f"room {name!r} is in no layer: place it in LAYERS ({__file__})")


def shared(a: str, b: str) -> bool:
    return any({a, b} <= set(pair) for pair in SHARED)


def test_every_room_of_the_package_has_a_layer():
    for module in _modules():
        layer_of(room(module))


def test_no_room_imports_a_room_above_it_or_beside_it():
    upward = []
    for found in imports():
        source, target = room(found.source), room(found.target)
        if source == target or shared(source, target):
            continue
        if layer_of(target) >= layer_of(source):
            upward.append(f"{found.source}:{found.line} imports {found.target}")
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_the_pure_rooms_import_nothing_that_does_io():
    wrong = [
        f"{found.source}:{found.line} imports {found.target}"
        for found in imports()
        if room(found.source) in PURE and room(found.target) in IO
    ]
    assert not wrong, "\n".join(wrong)


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_modules():
    edges: dict[str, set[str]] = {}
    for found in imports():
        if not found.type_only and found.target != found.source:
            edges.setdefault(found.source, set()).add(found.target)
    cycles = [sorted(c) for c in _cycles(edges)]
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_finder_finds_a_cycle_and_the_layer_check_an_upward_import():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert layer_of("journal") > layer_of("observe")
    assert layer_of("cli") > layer_of("journal")  # so journal -> cli would be caught
