"""The listening socket of `blindspots serve` (and the Label Studio servers), bound before anything is printed.

Why bind first: uvicorn binds after the app is built and the address announced, so a busy port ended in "serving
... on http://127.0.0.1:8000/" followed by a traceback line and exit code 3. Binding here turns it into one line
`error: --port: ...` (exit code 2) that suggests another port, and the server then uses this very socket (no
window in which another process could take the port).
"""
from __future__ import annotations

import errno
import socket


def bind_port(host: str, port: int, *, option: str = "--port") -> socket.socket:
    """A TCP socket bound to (host, port) and listening; ValueError naming `option` when the port is taken or
    the address cannot be bound."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{option}: expected a TCP port from 0 to 65535, got {port!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                            flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise ValueError(f"--host: expected an address of this machine, got {host!r} ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a port in TIME_WAIT is free
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ValueError(f"{option}: expected a free TCP port on {host}, got {port}, which another program "
                             f"is using; choose another with {option} {port + 1 if port < 65535 else 8000}") from None
        raise ValueError(f"{option}: cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def serve_on(uvicorn: object, app: object, sock: socket.socket, **config: object) -> None:
    """Run `app` with uvicorn on the bound socket `sock` (config: uvicorn.Config's keywords)."""
    server = uvicorn.Server(uvicorn.Config(app, **config))  # type: ignore[attr-defined]
    server.run(sockets=[sock])
