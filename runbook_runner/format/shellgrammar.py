"""Where a placeholder sits in the shell's grammar: a small tokenizer of POSIX sh.

A value goes in as ``shlex.quote(value)``: either only characters that are safe
unquoted, or one single-quoted string (``'`` written as ``'"'"'``). That is one
literal word exactly where the shell reads a *new* quote unquoted: at the top level
of the command, not inside '...' or "..." (where the quotes would nest and the value
would run), not inside $(...), `...`, ${...}, a comment or a here-document body
(which the shell parses again, or not at all), not after ``\\`` or ``$`` (``\\'`` and
``$'`` change what the quote means). Glued to ordinary characters it is still one
word: ``--opt='a b'`` is ``--opt=a b`` to the command.

Which command a placeholder may then be an operand of is the policy of
:mod:`runbook_runner.format.datacommands`.
"""

from __future__ import annotations

import re

from runbook_runner.format.datacommands import (
    DATA_FIX,
    REDEFINERS,
    Word,
    command_name,
    operand_problem,
)

PLACEHOLDER = re.compile(
    r"\{\{\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\s*\}\}"
)
_LOOKUP_VARIABLES = re.compile(
    r"(?:PATH|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|BASH_LOADABLES_PATH|LD_[A-Z_]*)\+?="
)

_GLUE_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@%+")
_BEFORE_OK = _GLUE_OK | frozenset(" \t\n;&|<>")
_AFTER_OK = _GLUE_OK | frozenset(" \t\n;&|<>)")
_OPERATORS = frozenset(";&|()\n")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time", "exec"}
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_WORD_END = re.compile(r"[^\s;&|()<>]*")
_FIX = "write it as a whole word of its own, outside any quotes, e.g. echo GPU {{ item.name }}"


def shell_problems(source: str) -> list[tuple[int, str]]:
    """(offset, message) for each placeholder whose value could be anything but data.

    A small tokenizer of POSIX sh that knows the quoting context at each offset and the
    words of each simple command; the policy (which command a placeholder is an operand
    of) is :func:`operand_problem`.
    """
    spans = {m.start(): m.end() for m in PLACEHOLDER.finditer(source)}
    problems: list[tuple[int, str]] = []
    accepted: list[int] = []  # placeholders with no problem of their own
    redefinitions: list[str] = []  # what makes a command name run something else
    stack: list[str] = []  # enclosing contexts: ' " $( ` ${ (
    heredocs: list[tuple[str, bool]] = []  # pending here-document delimiters (word, strip tabs)
    in_word = False  # inside a word at the top level
    command_position = True
    pending_redirect = False  # the next word is a redirection's target
    words: list[Word] = []  # of the simple command being read, at the top level
    i, n = 0, len(source)

    def context_name() -> str:
        names = {
            "'": "inside single quotes",
            '"': "inside double quotes",
            "$(": "inside a $(...) command substitution",
            "`": "inside a `...` command substitution",
            "${": "inside a ${...} expansion",
            "(": "inside a $(...) command substitution",
        }
        return names.get(stack[-1], "inside quotes")

    def start_word(at: int, text: str) -> Word:
        nonlocal command_position, pending_redirect
        if pending_redirect:
            word = Word(at, "redirect")
            pending_redirect = False
        elif command_position and text in _KEYWORDS:
            word = Word(at, "keyword")
        elif command_position and _ASSIGNMENT.match(text):
            word = Word(at, "assign")
            if _LOOKUP_VARIABLES.match(text):
                redefinitions.append(text.split("=", 1)[0] + "=")
        else:
            word = Word(at, "word", command=command_position)
            command_position = False
        words.append(word)
        return word

    def end_word(at: int) -> None:
        nonlocal in_word
        if in_word and words:
            words[-1].end = at
            if words[-1].command:
                name = command_name(source[words[-1].start : at])
                if name in REDEFINERS:
                    redefinitions.append(name)
        in_word = False

    while i < n:
        c = source[i]
        if i in spans:
            end = spans[i]
            before = source[i - 1] if i > 0 else " "
            after = source[end] if end < n else " "
            problem: str | None = None
            if not stack and not in_word:
                start_word(i, source[i:end])
                in_word = True
            word = words[-1] if words and not stack else None
            if stack:
                problem = f"placeholder {context_name()}: its value could run as a command; {_FIX}"
            elif word is not None and word.command and word.start == i:
                problem = "placeholder as the command's name: its value would run; name the command in the runbook"
            elif word is not None and word.command:
                problem = "placeholder in the command's name: its value would run; name the command in the runbook"
            elif before not in _BEFORE_OK or after not in _AFTER_OK:
                glued = before if before not in _BEFORE_OK else after
                problem = f"placeholder glued to {glued!r}: the value would not stay one literal word; {_FIX}"
            elif word is not None and word.kind == "assign":
                problem = (
                    "placeholder in a variable's assignment: a variable's value can be run "
                    f"later, or steer the command it is set for; {DATA_FIX}"
                )
            elif word is not None and word.kind == "redirect":
                problem = (
                    "placeholder as a redirection's file: the value would choose what the "
                    f"shell opens (bash opens /dev/tcp/HOST/PORT); {DATA_FIX}"
                )
            elif word is not None:
                problem = operand_problem(source, words)
            if problem is not None:
                problems.append((i, problem))
            else:
                accepted.append(i)
            if word is not None:
                word.placeholders += 1
            i = end
            continue
        top = stack[-1] if stack else None
        if top == "'":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if top == "`":
            if c == "\\":
                i = _advance(i, 2, spans)
            else:
                if c == "`":
                    stack.pop()
                i += 1
            continue
        if top == '"':
            if c == "\\":
                i = _advance(i, 2, spans)
            elif c == '"':
                stack.pop()
                i += 1
            elif source.startswith("$(", i):
                stack.append("$(")
                i = _advance(i, 2, spans)
            elif source.startswith("${", i) and i + 1 not in spans:
                stack.append("${")
                i = _advance(i, 2, spans)
            elif c == "`":
                stack.append("`")
                i += 1
            else:
                i += 1
            continue
        # unquoted: the top level, or inside $( ${ (
        if not stack and source.startswith("<<", i) and not source.startswith("<<<", i):
            end_word(i)
            j = i + 2
            strip = j < n and source[j] == "-"
            j += strip
            while j < n and source[j] in " \t":
                j += 1
            delimiter = _WORD_END.match(source, j)
            marker = delimiter.group() if delimiter else ""
            heredocs.append((marker.replace("'", "").replace('"', "").replace("\\", ""), strip))
            for offset in spans:
                if i < offset < j + len(marker):
                    problems.append((offset, f"placeholder in a here-document's delimiter; {_FIX}"))
            i = j + len(marker)
            continue
        if not stack and c in "<>":
            # A redirection: a number glued before it is its file descriptor, and the next
            # word is its target (<<< here-string, >&, >>, >|, <>, <& included).
            if in_word and words and source[words[-1].start : i].isdigit():
                fd = words[-1]
                fd.kind = "fd"
                if fd.command:
                    fd.command, command_position = False, True
            end_word(i)
            i += 1
            while i < n and source[i] in "<>&|" and i not in spans:
                i += 1
            pending_redirect = True
            continue
        if not stack and not in_word and c not in " \t" and c not in _OPERATORS:
            if c == "#":  # a comment, to the end of the line
                newline = source.find("\n", i)
                stop = n if newline < 0 else newline
                for start in spans:
                    if i < start < stop:
                        problems.append(
                            (
                                start,
                                f"placeholder in a comment: a newline in its value would start a command; {_FIX}",
                            )
                        )
                i = stop
                continue
            first = _WORD_END.match(source, i)
            text = first.group() if first else ""
            nearest = min((s for s in spans if i <= s), default=n)
            start_word(i, text[: max(0, nearest - i)])
            in_word = True
        if c == "\\":
            i = _advance(i, 2, spans)
            continue
        if c in " \t" and not stack:
            end_word(i)
            i += 1
            continue
        if c == "\n" and not stack:
            end_word(i)
            command_position, pending_redirect = True, False
            words.clear()
            i += 1
            if heredocs:
                i = _skip_heredocs(source, i, heredocs, spans, problems)
                heredocs.clear()
            continue
        if c in "'\"`":
            stack.append(c)
            i += 1
            continue
        if source.startswith("$(", i) or source.startswith("<(", i) or source.startswith(">(", i):
            stack.append("$(")
            i = _advance(i, 2, spans)
            continue
        if source.startswith("${", i) and i + 1 not in spans:
            stack.append("${")
            i = _advance(i, 2, spans)
            continue
        if c == "}" and top == "${":
            stack.pop()
            i += 1
            continue
        if c == "(" and stack:
            stack.append("(")
            i += 1
            continue
        if c == ")" and stack and top in ("$(", "("):
            stack.pop()
            i += 1
            continue
        if c in _OPERATORS and not stack:
            end_word(i)
            if c == "(" and not command_position and re.match(r"\(\s*\)", source[i:]):
                redefinitions.append("a function definition")
            # "(" starts a command only where a command may start; after a command's words
            # it is bash's array syntax (or a syntax error): the same command goes on, so
            # that `eval A=()printf {{ v }}` is still seen as eval's.
            if c in ";&|" or (c == "(" and command_position):
                command_position, pending_redirect = True, False
                words.clear()
            i += 1
            continue
        i += 1
    end_word(n)
    if redefinitions and accepted:
        what = ", ".join(dict.fromkeys(redefinitions))
        for offset in accepted:
            problems.append(
                (
                    offset,
                    f"placeholder in a command that also uses {what}: that can change what a "
                    "command name runs, so no operand is sure to stay data; keep such set-up "
                    "out of a command that takes a value",
                )
            )
    problems.sort()
    return problems


def _advance(i: int, by: int, spans: dict[int, int]) -> int:
    """``i + by``, but never past the start of a placeholder."""
    for k in range(i + 1, i + by):
        if k in spans:
            return k
    return i + by


def _skip_heredocs(
    source: str,
    start: int,
    heredocs: list[tuple[str, bool]],
    spans: dict[int, int],
    problems: list[tuple[int, str]],
) -> int:
    """Past the bodies of the pending here-documents; placeholders in them are problems."""
    i = start
    for delimiter, strip in heredocs:
        while i < len(source):
            newline = source.find("\n", i)
            stop = len(source) if newline < 0 else newline
            line = source[i:stop]
            for offset in spans:
                if i <= offset < stop:
                    problems.append(
                        (
                            offset,
                            f"placeholder in a here-document: its value is not quoted there; {_FIX}",
                        )
                    )
            i = stop + 1
            if (line.lstrip("\t") if strip else line) == delimiter:
                break
    return min(i, len(source))
