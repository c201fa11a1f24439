"""A simulated GPU server: one model and one renderer of its nvidia-smi and free output.

The tests' stand-in commands (``standin.py``, run on the test sshd's PATH) and
the drill share it. Standard library only: the stand-ins run under the test
host's system Python, outside the project's virtual environment.
"""
