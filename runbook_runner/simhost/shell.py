"""A small POSIX-shell subset for the drill's simulated host. Nothing here runs for real.

Enough of sh to run what the runbooks and the transport send: ``;``, newlines,
``&&``, ``||``, ``!``, pipes, ``if/then/elif/else/fi``, ``for/in/do/done``,
variables (``$x``, ``${x}``, ``$$``, ``$?``), quotes, and the redirections
``>&2``, ``2>&1``, ``>/dev/null``, ``2>/dev/null``. Commands are the simulator's
(commands.py) plus a few utilities (echo, printf, grep, head, tail, ps, kill,
sleep, id...). Anything else fails with "not simulated", never a silent success.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runbook_runner.simhost.commands import COMMANDS, Env
from runbook_runner.simhost.model import SHM_DIR

Word = list[tuple[str, str]]  # (text, kind): kind "lit" (quoted), "dq" (double-quoted), "bare"
_OPERATORS = ("&&", "||", ";;", ";", "|", "\n", "(", ")")
_RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "!"}


class ShellSyntaxError(Exception):
    pass


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


# -- lexing ---------------------------------------------------------------------------------


@dataclass
class _Token:
    kind: str  # "word", "op", "redirect"
    word: Word = field(default_factory=list)
    text: str = ""


def _lex(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(source)
    word: Word = []

    def flush() -> None:
        nonlocal word
        if word:
            tokens.append(_Token("word", word))
            word = []

    while i < n:
        c = source[i]
        if c in " \t":
            flush()
            i += 1
        elif c == "\\" and i + 1 < n:
            if source[i + 1] == "\n":
                i += 2  # line continuation
            else:
                word.append((source[i + 1], "lit"))
                i += 2
        elif c == "'":
            end = source.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated quoted string")
            word.append((source[i + 1 : end], "lit"))
            i = end + 1
        elif c == '"':
            j, text = i + 1, ""
            while j < n and source[j] != '"':
                if source[j] == "\\" and j + 1 < n and source[j + 1] in '"\\$`':
                    text += "\\" + source[j + 1] if source[j + 1] == "$" else source[j + 1]
                    j += 2
                else:
                    text += source[j]
                    j += 1
            if j >= n:
                raise ShellSyntaxError("unterminated quoted string")
            word.append((text, "dq"))
            i = j + 1
        elif c == "#" and not word:
            while i < n and source[i] != "\n":
                i += 1
        elif c in "<>":
            fd = ""
            if len(word) == 1 and word[0][1] == "bare" and word[0][0].isdigit():
                fd, word = word[0][0], []  # "2>&1": the 2 is the descriptor, not a word
            flush()
            match = re.match(r"([<>])(&\d|\s*[^\s;&|()<>]+)", source[i:])
            if match is None:
                raise ShellSyntaxError("a redirection needs a target")
            tokens.append(_Token("redirect", text=fd + match[1] + match[2].strip()))
            i += len(match.group(0))
        elif c in "&|;\n()":
            flush()
            two = source[i : i + 2]
            op = two if two in ("&&", "||", ";;") else c
            if op == "&":
                raise ShellSyntaxError("background jobs (&) are not simulated")
            tokens.append(_Token("op", text=op))
            i += len(op)
        else:
            j = i
            while j < n and source[j] not in " \t\\'\"&|;\n()<>":
                j += 1
            if j == i:  # a lone > or < inside a word
                j = i + 1
            word.append((source[i:j], "bare"))
            i = j
    flush()
    return tokens


# -- parsing -------------------------------------------------------------------------------------


@dataclass
class Simple:
    assignments: list[tuple[str, Word]]
    words: list[Word]
    redirects: list[str]


@dataclass
class Pipeline:
    commands: list[Any]
    negate: bool = False


@dataclass
class AndOr:
    first: Pipeline
    rest: list[tuple[str, Pipeline]]


@dataclass
class If:
    branches: list[tuple[list[AndOr], list[AndOr]]]
    otherwise: list[AndOr] | None


@dataclass
class For:
    name: str
    items: list[Word] | None
    body: list[AndOr]


def _plain(word: Word) -> str | None:
    """The word's text if it is one unquoted piece (a reserved word can only be that)."""
    return word[0][0] if len(word) == 1 and word[0][1] == "bare" else None


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def peek_word(self) -> str | None:
        token = self.peek()
        return _plain(token.word) if token and token.kind == "word" else None

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def skip_separators(self) -> None:
        while (token := self.peek()) and token.kind == "op" and token.text in (";", "\n"):
            self.take()

    def expect_word(self, word: str) -> None:
        self.skip_separators()
        if self.peek_word() != word:
            found = self.peek()
            raise ShellSyntaxError(
                f"expected '{word}', found {found.text or _plain(found.word) if found else 'end'}"
            )
        self.take()

    def list_until(self, *ends: str) -> list[AndOr]:
        items: list[AndOr] = []
        while True:
            self.skip_separators()
            token = self.peek()
            if token is None or (self.peek_word() in ends):
                return items
            if token.kind == "op" and token.text == ")":
                return items
            items.append(self.and_or())

    def and_or(self) -> AndOr:
        first = self.pipeline()
        rest = []
        while (token := self.peek()) and token.kind == "op" and token.text in ("&&", "||"):
            op = self.take().text
            while (t := self.peek()) and t.kind == "op" and t.text == "\n":
                self.take()
            rest.append((op, self.pipeline()))
        return AndOr(first, rest)

    def pipeline(self) -> Pipeline:
        negate = False
        if self.peek_word() == "!":
            self.take()
            negate = True
        commands = [self.command()]
        while (token := self.peek()) and token.kind == "op" and token.text == "|":
            self.take()
            commands.append(self.command())
        return Pipeline(commands, negate)

    def command(self) -> Any:
        word = self.peek_word()
        if word == "if":
            return self.if_clause()
        if word == "for":
            return self.for_clause()
        return self.simple()

    def if_clause(self) -> If:
        self.take()
        branches = []
        condition = self.list_until("then")
        self.expect_word("then")
        body = self.list_until("elif", "else", "fi")
        branches.append((condition, body))
        otherwise = None
        while True:
            word = self.peek_word()
            if word == "elif":
                self.take()
                condition = self.list_until("then")
                self.expect_word("then")
                branches.append((condition, self.list_until("elif", "else", "fi")))
            elif word == "else":
                self.take()
                otherwise = self.list_until("fi")
            else:
                self.expect_word("fi")
                return If(branches, otherwise)

    def for_clause(self) -> For:
        self.take()
        token = self.take()
        name = _plain(token.word) if token.kind == "word" else None
        if not name or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ShellSyntaxError("for needs a variable name")
        items = None
        if self.peek_word() == "in":
            self.take()
            items = []
            while (t := self.peek()) and t.kind == "word":
                items.append(self.take().word)
        self.expect_word("do")
        body = self.list_until("done")
        self.expect_word("done")
        return For(name, items, body)

    def simple(self) -> Simple:
        assignments: list[tuple[str, Word]] = []
        words: list[Word] = []
        redirects: list[str] = []
        while (token := self.peek()) and token.kind in ("word", "redirect"):
            if token.kind == "redirect":
                redirects.append(self.take().text)
                continue
            if not words and words is not None and token.word and token.word[0][1] == "bare":
                match = re.match(r"([A-Za-z_]\w*)=(.*)$", token.word[0][0], re.S)
                if match:
                    self.take()
                    assignments.append((match[1], [(match[2], "bare"), *token.word[1:]]))
                    continue
            if (
                words
                and _plain(token.word) in _RESERVED - {"!"}
                and _plain(token.word) not in ("in",)
            ):
                break
            if not words and _plain(token.word) in ("then", "do", "done", "fi", "elif", "else"):
                break
            words.append(self.take().word)
        if not words and not assignments and not redirects:
            token = self.peek()
            found = (token.text or _plain(token.word)) if token else "end of input"
            raise ShellSyntaxError(f"syntax error near {found!r}")
        return Simple(assignments, words, redirects)


def parse(source: str) -> list[AndOr]:
    parser = _Parser(_lex(source))
    items = parser.list_until()
    if parser.peek() is not None:
        raise ShellSyntaxError(f"syntax error near {parser.peek().text!r}")  # type: ignore[union-attr]
    return items


# -- running --------------------------------------------------------------------------------------


class Shell:
    """Runs scripts against a simulated host; ``env`` collects stdout and stderr."""

    def __init__(
        self, env: Env, *, pid: int = 3000, utilities: dict[str, Callable[..., int]] | None = None
    ) -> None:
        self.env = env
        self.vars: dict[str, str] = {"$": str(pid), "?": "0", "HOME": "/root", "USER": "root"}
        from runbook_runner.simhost.utilities import UTILITIES  # they run shells too

        self.utilities = dict(UTILITIES if utilities is None else utilities)
        self.calls: list[list[str]] = []

    def run(self, source: str) -> int:
        try:
            script = parse(source)
        except ShellSyntaxError as error:
            self.env.err(f"sh: syntax error: {error}\n")
            return 2
        try:
            return self.run_list(script)
        except _Exit as done:
            return done.status

    def run_list(self, items: list[AndOr]) -> int:
        status = 0
        for item in items:
            status = self.run_and_or(item)
        return status

    def run_and_or(self, item: AndOr) -> int:
        status = self.run_pipeline(item.first)
        for op, pipeline in item.rest:
            if (op == "&&" and status == 0) or (op == "||" and status != 0):
                status = self.run_pipeline(pipeline)
        return status

    def run_pipeline(self, pipeline: Pipeline, stdin: str = "") -> int:
        status = 0
        data = stdin
        for number, command in enumerate(pipeline.commands):
            last = number == len(pipeline.commands) - 1
            if last:
                status = self.run_command(command, data)
            else:
                captured = Env(
                    self.env.host, self.env.procs, on_reboot=self.env.on_reboot, user=self.env.user
                )
                saved, self.env = self.env, captured
                try:
                    self.run_command(command, data)
                finally:
                    self.env = saved
                    self.env.stderr.extend(captured.stderr)
                data = "".join(captured.stdout)
        status = (0 if status else 1) if pipeline.negate else status
        self.vars["?"] = str(status)
        return status

    def run_command(self, command: Any, stdin: str) -> int:
        if isinstance(command, If):
            for condition, body in command.branches:
                if self.run_list(condition) == 0:
                    return self.run_list(body)
            return self.run_list(command.otherwise) if command.otherwise is not None else 0
        if isinstance(command, For):
            values = [v for item in command.items or [] for v in self.expand(item)]
            status = 0
            for value in values:
                self.vars[command.name] = value
                status = self.run_list(command.body)
            return status
        return self.run_simple(command, stdin)

    def expand(self, word: Word) -> list[str]:
        """Expand variables; unquoted results are split on blanks (no globbing: no such files)."""
        fields: list[str] = [""]
        quoted = False

        def substitute(text: str) -> str:
            return re.sub(
                r"\$(?:\{(\w+)\}|(\w+|\$|\?))",
                lambda m: self.vars.get(m[1] or m[2], ""),
                text,
            ).replace("\\$", "$")

        for text, kind in word:
            if kind == "lit":
                fields[-1] += text
                quoted = True
            elif kind == "dq":
                fields[-1] += substitute(text)
                quoted = True
            else:
                value = substitute(text)
                if "$" in text:
                    parts = value.split()
                    if not parts:
                        continue
                    if value[:1].isspace():
                        fields.append("")
                    fields[-1] += parts[0]
                    for part in parts[1:]:
                        fields.append(part)
                    if value[-1:].isspace():
                        fields.append("")
                else:
                    fields[-1] += value
        if not quoted and len(fields) == 1 and fields[0] == SHM_DIR + "/*":
            names = [s.path for s in self.env.host.shm]
            return names or fields  # like sh: a glob that matches nothing stays as it is
        return [f for f in fields if f or quoted]

    def run_simple(self, command: Simple, stdin: str) -> int:
        for name, word in command.assignments:
            self.vars[name] = " ".join(self.expand(word))
        argv = [value for word in command.words for value in self.expand(word)]
        if not argv:
            return 0
        out, err = self.env.stdout, self.env.stderr
        capture_out: list[str] = []
        capture_err: list[str] = []
        self.env.stdout, self.env.stderr = capture_out, capture_err
        try:
            status = self.call(argv, stdin)
        finally:
            self.env.stdout, self.env.stderr = out, err
        self.redirect(command.redirects, "".join(capture_out), "".join(capture_err))
        self.vars["?"] = str(status)
        return status

    def redirect(self, redirects: list[str], stdout: str, stderr: str) -> None:
        targets = {0: "in", 1: "out", 2: "err"}
        for spec in redirects:
            match = re.fullmatch(r"(\d?)>&(\d)", spec)
            if match:
                source = int(match[1] or 1)
                targets[source] = targets[int(match[2])]
                continue
            match = re.fullmatch(r"(\d?)([<>])(\S+)", spec)
            if match and (match[2] == "<" or match[3] != "/dev/null"):
                self.env.err(f"sh: {spec}: files are not simulated; only /dev/null\n")
            if match:
                targets[int(match[1] or (0 if match[2] == "<" else 1))] = "null"
        for text, fd in ((stdout, 1), (stderr, 2)):
            if targets[fd] == "out":
                self.env.out(text)
            elif targets[fd] == "err":
                self.env.err(text)

    def call(self, argv: list[str], stdin: str) -> int:
        name, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        self.calls.append([name, *args])
        if name in self.env.host.missing_commands:
            self.env.err(f"sh: 1: {name}: not found\n")
            return 127
        if name in self.utilities:
            return self.utilities[name](self, args, stdin)
        if name in COMMANDS:
            return COMMANDS[name](self.env, args)
        self.env.err(
            f"sh: {name}: not simulated in this drill (the simulated host knows: "
            f"{', '.join(sorted({*COMMANDS, *self.utilities}))})\n"
        )
        return 127
