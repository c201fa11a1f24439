"""Pure decisions: who owns what on the host (ownership), and what a step may act on.

Nothing here does I/O: the engine observes, these functions decide, the engine acts.
"""
