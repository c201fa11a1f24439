"""The engine: carries a runbook out on one host (observe, decide, act, wait, escalate).

``runner.py`` holds the step loop (Runner), ``observing.py`` how it looks at the host,
``waiting.py`` its waits and reboots. The decision of what a step does is plan/decide.py's.
"""

from runbook_runner.engine.observing import OBSERVE_IN_C_LOCALE, Transport
from runbook_runner.engine.runner import Runner

__all__ = ["OBSERVE_IN_C_LOCALE", "Runner", "Transport"]
