"""A stand-in on the simulated host's PATH: ``standin_client.py NAME ARGS...``.

It asks the host's stand-in server ($RBR_SIM_SOCKET) to run NAME over the simulated
state, prints what it answers and exits with its status. Standard library only, and no
import of the package (python3 -S -I).

Request: LC_ALL, then each argument, each ended by a NUL byte.
Reply: ``STATUS STDOUT_LENGTH\n``, then stdout, then stderr.
"""

import os
import socket
import sys


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "stand-in"
    request = b"".join(os.fsencode(part) + b"\0" for part in [os.environ.get("LC_ALL", ""), *argv])
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(os.environ["RBR_SIM_SOCKET"])
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except (OSError, KeyError) as error:
        sys.stderr.write(f"{name}: the simulated host does not answer ({error})\n")
        return 126
    reply = b"".join(chunks)
    header, _, body = reply.partition(b"\n")
    status, length = (int(x) for x in header.split())
    sys.stdout.buffer.write(body[:length])
    sys.stdout.flush()
    sys.stderr.buffer.write(body[length:])
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
