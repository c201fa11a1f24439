"""Many hosts at once: selection (node sets, inventories, --limit), fan-out, the summary.

Pure logic (inventory.py, selection.py, summary.py, rollout.py) is apart from the
threads that reach hosts (fanout.py); only the CLI (cli/fleet.py) prints.
"""
