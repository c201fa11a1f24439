from runbook_runner.cli import entry

entry()
