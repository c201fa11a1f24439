"""Structural validation of a runbook against the published JSON Schema.

The schema (``runbook_runner/schema/runbook.schema.json``) is the one editors
use through ``# yaml-language-server: $schema=...``; here its errors are
rewritten into short messages a person can act on, each with its position.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path as FilePath
from typing import Any

from runbook_runner.format.yamlsource import Path, Problem, Source

SCHEMA_FILE = "runbook.schema.json"


@cache
def _schema_text() -> str:
    return (
        resources.files("runbook_runner")
        .joinpath("schema")
        .joinpath(SCHEMA_FILE)
        .read_text("utf-8")
    )


@cache
def schema() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(_schema_text())
    return result


def cache_dir(environ: dict[str, str] | os._Environ[str]) -> FilePath:
    """Where the digests of documents that passed the schema are kept ($XDG_CACHE_HOME)."""
    base = environ.get("XDG_CACHE_HOME") or str(FilePath.home() / ".cache")
    return FilePath(base) / "runbook-runner" / "schema-valid"


def validate_once(source: Source, digest: str) -> list[Problem]:
    """:func:`validate`, skipped for a document (by the SHA-256 of its bytes) that already
    passed this very schema: importing jsonschema and walking the schema is most of the
    time a load takes. Only a pass is remembered; a cache that cannot be written is no error.
    """
    schema_digest = hashlib.sha256(_schema_text().encode()).hexdigest()
    key = hashlib.sha256(f"{schema_digest} {digest}".encode()).hexdigest()
    marker = cache_dir(os.environ) / key
    if marker.is_file():
        return []
    problems = validate(source)
    if not problems:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass
    return problems


def schema_path() -> str:
    return str(resources.files("runbook_runner").joinpath("schema").joinpath(SCHEMA_FILE))


_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return f"{type(value).__name__} {value!r}"


def _alternatives_seen(error: Any) -> str:
    """What a value that fits none of the alternatives holds: for a mapping, the keys the
    alternatives tell apart (``command: 'free -b', text: 'abc'``), not just "a mapping"."""
    value = error.instance
    alternatives = error.validator_value if isinstance(error.validator_value, list) else []
    telling: set[str] = set()
    for alternative in alternatives:
        if isinstance(alternative, dict):
            telling.update(alternative.get("required", ()))
            telling.update(alternative.get("properties", {}))
    if not isinstance(value, dict) or not telling & set(value):
        return _describe(value)
    return ", ".join(f"{key}: {_short(value[key])}" for key in value if key in telling)


def _short(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return _describe(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _expected_types(types: str | list[str]) -> str:
    names = [_TYPE_NAMES.get(t, t) for t in ([types] if isinstance(types, str) else types)]
    return " or ".join(names)


def validate(source: Source, against: dict[str, Any] | None = None) -> list[Problem]:
    """Every violation of the runbook schema (or of ``against``, another of ours) in the
    document, as positioned problems."""
    from jsonschema import Draft202012Validator  # imported here: it is slow to import

    validator = Draft202012Validator(against or schema())
    errors = list(validator.iter_errors(source.data))
    # A mapping with a mistyped key: "expected either 'command' or 'text'", or "missing
    # required key 'title'" when the typo is 'titel', only confuse next to the message on
    # the key itself ("did you mean 'command'?"). The typo is the one thing to fix.
    typos: dict[Path, set[str]] = {}
    for error in errors:
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = sorted(error.schema.get("properties", {}))
            meant = typos.setdefault(tuple(error.absolute_path), set())
            for key in error.instance:
                if key not in known:
                    meant.update(difflib.get_close_matches(str(key), known, n=1) or ["?"])
    problems: list[Problem] = []
    for error in errors:
        path = tuple(error.absolute_path)
        if path in typos and error.validator in {"anyOf", "oneOf"}:
            continue
        if path in typos and error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            if missing in typos[path]:
                continue
        problems.extend(_problems_for(error, source))
    return problems


def _problems_for(error: Any, source: Source) -> list[Problem]:
    path: Path = tuple(error.absolute_path)
    kind, subschema, value = error.validator, error.schema, error.instance
    hint = subschema.get("x-message") if isinstance(subschema, dict) else None
    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(subschema.get("properties", {}))
        extras = [k for k in value if k not in known]
        return [
            Problem(source.mark_of((*path, k), key=True), (*path, k), _unknown_key(k, known))
            for k in extras
        ]
    if "propertyNames" in error.schema_path:
        # A key of a user-named mapping (parameters, checks...) with a bad name.
        key = error.instance
        message = f"{key!r} is not a valid name: expected {hint or error.message}"
        return [Problem(source.mark_of((*path, key), key=True), (*path, key), message)]
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [Problem(source.mark_of(path), path, f"missing required key {missing!r}")]
    if kind == "type":
        message = f"expected {_expected_types(error.validator_value)}, got {_describe(value)}"
        return [Problem(source.mark_of(path), path, message)]
    if kind == "enum":
        choices = ", ".join(str(c) for c in error.validator_value)
        message = f"must be one of: {choices}; got {_describe(value)}"
        return [Problem(source.mark_of(path), path, message)]
    if kind in {"anyOf", "oneOf"}:
        message = f"expected {hint or 'another form'}, got {_alternatives_seen(error)}"
        return [Problem(source.mark_of(path), path, message)]
    if kind == "pattern":
        message = f"{value!r} is not valid: expected {hint or 'to match ' + error.validator_value}"
        return [Problem(source.mark_of(path), path, message)]
    messages = {
        "minItems": "must not be empty",
        "minProperties": "must not be empty",
        "minLength": "must not be empty",
        "exclusiveMinimum": f"must be greater than {error.validator_value}",
        "minimum": f"must be at least {error.validator_value}",
        "maximum": f"must be at most {error.validator_value}",
    }
    message = messages.get(kind, error.message)
    return [Problem(source.mark_of(path), path, message)]


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(str(key), known, n=1)
    suggestion = f"; did you mean {close[0]!r}?" if close else f" (known keys: {', '.join(known)})"
    return f"unknown key {key!r}{suggestion}"
