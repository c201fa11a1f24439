"""A simulated GPU server: one model and one renderer of its nvidia-smi and free output.

The tests' stand-in commands (``standin.py``, run on the test sshd's PATH) and the
simulated hosts of ``runbook drill``, ``test`` and ``sim`` (a real shell with its own
stand-ins: ``hostshell.py``, served over SSH by ``sshserver.py``) share it. The model,
the renderers and the commands use the standard library only: ``standin.py`` runs under
the test host's system Python, outside the project's virtual environment.
"""
