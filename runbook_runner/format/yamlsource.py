"""YAML to plain values, remembering where every key and value came from.

PyYAML keeps the last of two equal keys without a word and can construct
Python objects from tags; here the document is composed into nodes by the
safe loader, duplicate keys are reported, and every value's position is kept
so that each error can say ``file:line:col``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]


@dataclass(frozen=True, order=True)
class Mark:
    line: int  # 1-based
    column: int  # 1-based


@dataclass(frozen=True, order=True)
class Problem:
    """One error in a source file, sortable by position."""

    mark: Mark
    path: Path
    message: str

    def format(self, filename: str) -> str:
        where = f"{filename}:{self.mark.line}:{self.mark.column}"
        label = format_path(self.path)
        return f"{where}: {label}: {self.message}" if label else f"{where}: {self.message}"


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@dataclass
class Source:
    """A parsed document: its data and the marks of values and of mapping keys."""

    data: Any
    value_marks: dict[Path, Mark] = field(default_factory=dict)
    key_marks: dict[Path, Mark] = field(default_factory=dict)
    # Scalars written on one line, plain or quoted: an offset into their text is a column.
    # The value is the number of columns before the text starts (1 for an opening quote).
    inline: dict[Path, int] = field(default_factory=dict)

    def mark_of(self, path: Path, key: bool = False) -> Mark:
        """The position of a value (or of its key), else of its nearest parent."""
        marks = self.key_marks if key else self.value_marks
        while path:
            if path in marks:
                return marks[path]
            if not key and path in self.key_marks:
                return self.key_marks[path]
            path = path[:-1]
        return self.value_marks.get((), Mark(1, 1))


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


def _mark(node: yaml.Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


MAX_DEPTH = 64  # nested mappings and sequences; PyYAML's composer recurses, 500 would crash it
MAX_VALUES = 100_000  # aliases and merge keys can expand a small file exponentially
MAX_DIGITS = 100  # a number's characters: Python refuses int() past 4,300 digits, and no
# count, size or index needs more than 30


def _too_deep(text: str) -> Problem | None:
    """The first collection nested deeper than MAX_DEPTH, found from the event stream.

    PyYAML's parser is a state machine but its composer recurses once per level: this
    pass (no recursion) stops a 500-deep document before the composer overflows the stack.
    """
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    return Problem(
                        Mark(mark.line + 1, mark.column + 1) if mark else Mark(1, 1),
                        (),
                        f"nested more than {MAX_DEPTH} levels deep",
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return None  # the composer reports it, with its position
    return None


def _merged_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many key/value pairs a mapping holds once its ``<<`` merge keys are expanded."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_ or not isinstance(node, yaml.MappingNode):
        return 1
    open_.add(id(node))
    total = 0
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for part in merged:
                total += _merged_size(part, sizes, open_)
                if total > MAX_VALUES:
                    break
        else:
            total += 1
        if total > MAX_VALUES:
            break
    open_.discard(id(node))
    sizes[id(node)] = total
    return total


class _Builder:
    MAX_VALUES = MAX_VALUES  # aliases can expand a small file exponentially ("billion laughs")

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.source = Source(None)
        self.problems: list[Problem] = []
        self._open: set[int] = set()  # nodes being built: meeting one again is a cycle
        self._count = 0
        self._merged_sizes: dict[int, int] = {}

    def build(self, node: yaml.Node, path: Path) -> Any:
        self._count += 1
        if self._count > self.MAX_VALUES:
            if self._count == self.MAX_VALUES + 1:
                self.problems.append(
                    Problem(
                        _mark(node),
                        path,
                        f"the document expands to more than {self.MAX_VALUES:,} values (aliases?)",
                    )
                )
            return None
        if id(node) in self._open:
            self.problems.append(Problem(_mark(node), path, "an alias that refers to itself"))
            return None
        self._open.add(id(node))
        try:
            return self._build(node, path)
        finally:
            self._open.discard(id(node))

    def _build(self, node: yaml.Node, path: Path) -> Any:
        self.source.value_marks[path] = _mark(node)
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            self.problems.append(
                Problem(_mark(node), path, f"the YAML tag {node.tag!r} is not allowed")
            )
            return None
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        # Scalars have a style; the stubs do not say so. libyaml writes '' for plain.
        style = getattr(node, "style", None) or None
        if node.start_mark.line == node.end_mark.line and style in (None, "'", '"'):
            self.source.inline[path] = 0 if style is None else 1
        if node.tag in _NUMBER_TAGS and len(node.value) > MAX_DIGITS:
            self.problems.append(
                Problem(
                    _mark(node),
                    path,
                    f"a number of {len(node.value):,} characters (at most {MAX_DIGITS})",
                )
            )
            return None
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError) as error:
            message = _yaml_message(error) if isinstance(error, yaml.YAMLError) else str(error)
            self.problems.append(Problem(_mark(node), path, message))
            return None
        if isinstance(value, str) and "\0" in value:
            self.problems.append(
                Problem(
                    _mark(node),
                    path,
                    "a NUL character (\\0): no command, argument or name can hold one",
                )
            )
            return None
        return value

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        if _merged_size(node, self._merged_sizes, set()) > MAX_VALUES:
            self.problems.append(
                Problem(
                    _mark(node),
                    path,
                    f"merge keys (<<) expand this mapping to more than {MAX_VALUES:,} values",
                )
            )
            return result
        own = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
        try:
            self.loader.flatten_mapping(node)  # resolves "<<" merge keys
        except yaml.YAMLError as error:
            self.problems.append(Problem(_mark(node), path, _yaml_message(error)))
            return result
        merged = len(node.value) - own  # flatten_mapping puts merged pairs first
        for index, (key_node, value_node) in enumerate(node.value):
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(Problem(_mark(key_node), path, "a key must be a plain value"))
                continue
            key = self.loader.construct_object(key_node)
            key = key if isinstance(key, str) else str(key)
            key_path: Path = (*path, key)
            if index < merged and key in result:
                continue  # of two merged mappings, the first one's key stays (YAML 1.1 merge)
            if index >= merged and key in result and key_path not in self.source.key_marks:
                del result[key]  # a key written here overrides a merged one
            if key in result:
                first = self.source.key_marks[key_path]
                self.problems.append(
                    Problem(
                        _mark(key_node),
                        (*path, key),
                        f"duplicate key {key!r} (first at line {first.line}); "
                        "YAML would silently keep only the last one",
                    )
                )
                continue
            if index >= merged:
                self.source.key_marks[key_path] = _mark(key_node)
            result[key] = self.build(value_node, key_path)
        return result


def _yaml_message(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        parts = [error.context, error.problem]
        return "; ".join(p for p in parts if p) or str(error)
    return str(error)


def load(text: str) -> tuple[Source, list[Problem]]:
    """Compose one YAML document; return its values, marks, and any problems."""
    fast = _load_with_libyaml(text)
    if fast is not None:
        return fast, []
    return _load(text, yaml.SafeLoader)


def _load_with_libyaml(text: str) -> Source | None:
    """The same through libyaml's parser (several times faster), for a document with no problem.

    libyaml's marks are the same (line, and column in characters); its messages are not, so a
    document with any problem is loaded again by the pure-Python loader, whose words we report.
    """
    loader_class = getattr(yaml, "CSafeLoader", None)
    if loader_class is None:
        return None
    try:
        source, problems = _load(text, loader_class)
    except Exception:  # anything libyaml dislikes: the pure loader says it properly
        return None
    return None if problems or source.data is None else source


def _load(text: str, loader_class: Any) -> tuple[Source, list[Problem]]:
    try:
        loader = loader_class(text)
    except yaml.reader.ReaderError as error:  # a character YAML does not allow (NUL, ...)
        before = text[: error.position]
        where = Mark(before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1)
        return Source(None), [
            Problem(where, (), f"character U+{int(error.character):04X} is not allowed in YAML")
        ]
    deep = _too_deep(text)
    if deep is not None:
        loader.dispose()
        return Source(None), [deep]
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = Mark(mark.line + 1, mark.column + 1) if mark else Mark(1, 1)
        return Source(None), [Problem(where, (), "YAML syntax error: " + _yaml_message(error))]
    except yaml.YAMLError as error:
        return Source(None), [Problem(Mark(1, 1), (), "YAML error: " + str(error))]
    finally:
        loader.dispose()
    if node is None:
        return Source(None), [Problem(Mark(1, 1), (), "the file is empty")]
    builder = _Builder(loader)
    builder.source.data = builder.build(node, ())
    return builder.source, builder.problems


class DocumentError(ValueError):
    """A local YAML or JSON file (a state file, an inventory) that :func:`load_data` refuses."""


def load_data(text: str, label: str) -> Any:
    """The plain values of a YAML (or JSON) document, within the same bounds as a runbook:
    depth, number of values, digits, duplicate keys, NUL. The first problem is raised as
    :class:`DocumentError`, ``label:LINE:COL: field: message``; an empty document is None."""
    source, problems = load(text)
    if [p.message for p in problems] == ["the file is empty"]:
        return None
    if problems:
        raise DocumentError(min(problems).format(label))
    return source.data
