"""A ProxyCommand for the tests: relays stdin/stdout to HOST PORT (like ``nc HOST PORT``)."""

import socket
import sys
import threading

sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))


def upstream() -> None:
    while data := sys.stdin.buffer.read1(65536):
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)


threading.Thread(target=upstream, daemon=True).start()
while data := sock.recv(65536):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
