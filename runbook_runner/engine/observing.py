"""Looking at the host: observations sent (batched), parsed into typed state, the
subject's processes classified (health asked on the host), and checks evaluated.

Part of the engine (engine/runner.py's Runner is built on it); prints nothing. A dropped
connection is retried here, since an observation only reads and may be sent again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from runbook_runner.errors import ConnectionLost, HostKeyChanged, ParseError, TransportError
from runbook_runner.events import (
    Answer,
    ConfirmRequest,
    Event,
    Observed,
    Reconnecting,
)
from runbook_runner.expect import (
    CheckResult,
    evaluate_checks,
)
from runbook_runner.format import expr
from runbook_runner.format.template import Template
from runbook_runner.observe import PARSERS
from runbook_runner.observe.state import ProcessOwner, Unavailable
from runbook_runner.plan import ownership
from runbook_runner.runbook import Expression, Runbook, Seconds, Step, Subject
from runbook_runner.ssh.batch import BatchCommand
from runbook_runner.status import Condition

if TYPE_CHECKING:  # the transport module imports paramiko, which is slow to load
    from runbook_runner.transport import CommandResult


class Transport(Protocol):
    is_root: bool

    def run(
        self, command: str, timeout: float, *, output_limit: int = ..., as_root: bool = False
    ) -> CommandResult: ...

    def alive(self) -> bool: ...

    def reconnect(self) -> object: ...


RECONNECT_FOR_S = 120.0  # how long a dropped connection is retried before the run stops
# Observations are parsed: run them in the C locale (as Ansible does), so that `free` prints
# "total used free" and numbers use a dot, whatever the host's or the login's language.
# Inside the command text, so that it holds under `sudo -n sh -c` too (sudo resets the env).
OBSERVE_IN_C_LOCALE = "export LC_ALL=C LANG=C LANGUAGE=C; "


# -- the runner -----------------------------------------------------------------------------


class Observing:
    """What the engine knows of the host, and how it looks at it."""

    # Set by Runner.__init__ (engine/runner.py).
    runbook: Runbook
    params: dict[str, Any]
    transport: Transport
    on_event: Callable[[Event], None]
    confirm: Callable[[ConfirmRequest], bool | Answer]
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    wall_clock: Callable[[], float]
    subject: Subject | None
    changed: dict[str, list[Mapping[str, Any]]]
    seen: dict[str, Any]  # the last round's observations, kept until something acts

    def render(
        self, template: Template, item: Any = None, *, raw: bool = False, masked: bool = False
    ) -> str:
        """A command with its values quoted; ``raw`` leaves values as they are (local text);
        ``masked`` shows secret parameters as '***' (for the terminal and the journal)."""

        def lookup(name: str) -> Any:
            if name.startswith("item."):
                return getattr(item, name[5:])
            return self.params[name]

        if raw:
            return template.fill(lookup)
        secret = {name for name, p in self.runbook.parameters.items() if p.secret}
        return template.render(lookup, mask=(lambda name: name in secret) if masked else None)

    def seconds(self, value: Seconds) -> float:
        """A duration: a number, or an expression over the parameters."""
        if isinstance(value, Expression):
            return float(expr.evaluate(value.tree, self.params.__getitem__))
        return value

    def forget(self) -> None:
        """Something acted on the host: what was observed before no longer stands for it."""
        self.seen = {}

    def observe(self, names: Iterable[str] | None = None, *, reuse: bool = False) -> dict[str, Any]:
        """One observation round: the commands sent together, parsed (the subject's health
        and units asked once for the round). ``reuse``: what the last rounds saw since
        nothing acted is taken as it is, and only the rest is asked."""
        wanted = list(self.runbook.observations) if names is None else list(names)
        if reuse:
            if any(n not in self.seen for n in wanted):
                # A new round looks at everything not seen yet: the rungs after this one
                # read it from here until something acts.
                self._observe([n for n in self.runbook.observations if n not in self.seen])
            return {name: self.seen[name] for name in wanted}
        return self._observe(wanted)

    def _observe(self, wanted: list[str]) -> dict[str, Any]:
        state = self._round(wanted)
        self.seen.update(state)
        return state

    def _round(self, wanted: list[str]) -> dict[str, Any]:
        if not wanted:
            return {}
        remote = [n for n in wanted if self.runbook.observations[n].command is not None]
        run_many = getattr(self.transport, "run_many", None)
        if run_many is None or len(remote) < 2:
            state = {name: self._observe_one(name) for name in wanted}
            return state
        # One round trip for the set: the commands run together on the host.
        commands = {name: self._command_of(name) for name in remote}
        batch = [
            BatchCommand(
                OBSERVE_IN_C_LOCALE + commands[name],
                self.runbook.observations[name].timeout,
                as_root=self.runbook.observations[name].root,
                alone=self.runbook.observations[name].alone,
            )
            for name in remote
        ]
        try:
            results = run_many(batch)
        except ConnectionLost as lost:  # observations only read: sending them again is safe
            self._reconnect(None, lost)
            results = run_many(batch)
        by_name = dict(zip(remote, results, strict=True))
        state = {
            name: self._parsed(name, commands[name], by_name[name])
            if name in by_name
            else self._observe_one(name)
            for name in wanted
        }
        return state

    def _command_of(self, name: str) -> str:
        command = self.runbook.observations[name].command
        assert command is not None
        return self.render(command)

    def _observe_one(self, name: str) -> Any:
        observation = self.runbook.observations[name]
        parser = PARSERS[observation.parser]
        if observation.text is not None:  # a parameter to parse, not a command to run
            text = self.render(observation.text, raw=True)
            try:
                return parser.parse(text, 0, text)
            except ParseError as error:
                return Unavailable(str(error), Condition.UNPARSABLE)
        command = self._command_of(name)
        sent = OBSERVE_IN_C_LOCALE + command
        try:
            result = self.transport.run(sent, observation.timeout, as_root=observation.root)
        except ConnectionLost as lost:  # an observation only reads: sending it again is safe
            self._reconnect(None, lost)
            result = self.transport.run(sent, observation.timeout, as_root=observation.root)
        return self._parsed(name, command, result)

    def _parsed(self, name: str, command: str, result: CommandResult) -> Any:
        """A command's result -> the parsed value, or Unavailable saying why not."""
        observation = self.runbook.observations[name]
        parser = PARSERS[observation.parser]
        if result.timed_out:
            return Unavailable(
                f"{_said(name, command)} timed out after {observation.timeout:g}s",
                Condition.TIMED_OUT,
            )
        status = result.exit_status if result.exit_status is not None else -1
        detail = (result.stderr or result.stdout).strip().splitlines()
        if status == 127:
            reason = f"{_said(name, command)} exited 127 (command not found)" + (
                f": {detail[-1]}" if detail else ""
            )
            return Unavailable(reason, Condition.NOT_FOUND)
        if status not in observation.ok_exit and parser.tool != "nvidia-smi":
            reason = f"{_said(name, command)} exited {status}" + (
                f": {detail[-1]}" if detail else ""
            )
            return Unavailable(reason)
        try:
            value = parser.parse(result.stdout, status, command)
        except ParseError as error:
            return Unavailable(str(error), getattr(error, "condition", Condition.UNPARSABLE))
        if observation.parser == "process-owners" and self.subject is not None:
            value = self._classify(self.subject, value)
        return value

    def _classify(
        self, subject: Subject, records: tuple[ProcessOwner, ...]
    ) -> tuple[ProcessOwner, ...]:
        """Who owns each process, and whether the subject's instances are broken: their
        health is asked on the host, one request per live instance, and of one that answers
        200 its metrics, twice over the window, in one more request (plan/health.py)."""
        results = []
        for probe in ownership.probes(subject, records):
            try:
                answer = self.transport.run(
                    OBSERVE_IN_C_LOCALE + probe.command, subject.health_timeout_s + 10.0
                )
            except ConnectionLost:
                results.append(
                    ownership.ProbeResult(
                        probe.instance,
                        ownership.Health.CANNOT_TELL,
                        "the connection dropped while asking",
                    )
                )
                continue
            status = None if answer.timed_out else answer.exit_status
            result = ownership.judge_probe(probe, status, answer.stdout, answer.stderr)
            if result.health is ownership.Health.HEALTHY and probe.metrics_command:
                seconds = 2 * subject.health_timeout_s + probe.window_s + 10.0
                try:
                    second = self.transport.run(
                        OBSERVE_IN_C_LOCALE + probe.metrics_command, seconds
                    )
                except ConnectionLost:
                    result = ownership.judge_metrics(probe, result, 255, "", "connection dropped")
                else:
                    status = None if second.timed_out else second.exit_status
                    result = ownership.judge_metrics(
                        probe, result, status, second.stdout, second.stderr
                    )
            results.append(result)
        restarts: dict[str, int] = {}
        for unit_probe in ownership.unit_probes(subject, records):
            try:
                answer = self.transport.run(OBSERVE_IN_C_LOCALE + unit_probe.command, 30.0)
            except ConnectionLost:
                continue
            count = ownership.judge_unit(answer.exit_status, answer.stdout)
            if count is not None:
                restarts[unit_probe.unit] = count
        return ownership.classify(subject, records, results, restarts)

    def observations_for(self, check_names: Iterable[str]) -> list[str]:
        return self.runbook.observations_of(check_names)

    def check(self, check_names: Sequence[str]) -> tuple[dict[str, Any], list[CheckResult]]:
        state = self.observe(self.observations_for(check_names))
        results = evaluate_checks(check_names, self.runbook, state, self.params, self.changed)
        # Journalled as a "poll": the run's picture over time (a postmortem's chart) is drawn
        # from these, between the "before" and "after" of the goal.
        self.on_event(Observed("poll", state, tuple(results)))
        return state, results

    def check_goal(self, label: str, *, reuse: bool = False) -> Observed:
        state = self.observe(reuse=reuse)
        results = evaluate_checks(self.runbook.goal, self.runbook, state, self.params, self.changed)
        observed = Observed(label, state, tuple(results))
        self.on_event(observed)
        return observed

    def _reconnect(self, step: Step | None, lost: ConnectionLost) -> None:
        """Reconnect with a bounded backoff; give up (raising ``lost``) after RECONNECT_FOR_S."""
        start = self.clock()
        delay = 1.0
        while True:
            self.on_event(Reconnecting(step, self.clock() - start, RECONNECT_FOR_S))
            try:
                self.transport.reconnect()
                return
            except HostKeyChanged:
                raise
            except TransportError:
                if self.clock() - start + delay > RECONNECT_FOR_S:
                    raise lost from None
                self.sleep(delay)
                delay = min(delay * 2, 15.0)


def _said(name: str, command: str) -> str:
    """A command as a reason names it: whole when short, else by its observation's name
    (a script of several hundred characters would bury what went wrong)."""
    shown = command.removeprefix(OBSERVE_IN_C_LOCALE)
    return repr(shown) if len(shown) <= 60 else f"the command of {name!r}"
