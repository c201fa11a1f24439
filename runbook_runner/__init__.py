"""runbook-runner: executable runbooks for multi-GPU inference servers."""

__version__ = "0.1.0"
