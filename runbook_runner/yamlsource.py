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


def _mark(node: yaml.Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    MAX_VALUES = 100_000  # aliases can expand a small file exponentially ("billion laughs")

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.source = Source(None)
        self.problems: list[Problem] = []
        self._open: set[int] = set()  # nodes being built: meeting one again is a cycle
        self._count = 0

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
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as error:
            self.problems.append(Problem(_mark(node), path, _yaml_message(error)))
            return None

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        self.loader.flatten_mapping(node)  # resolves "<<" merge keys
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(Problem(_mark(key_node), path, "a key must be a plain value"))
                continue
            key = self.loader.construct_object(key_node)
            key = key if isinstance(key, str) else str(key)
            key_path: Path = (*path, key)
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
