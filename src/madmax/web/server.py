"""Run the app with uvicorn on one host and port, and open the page in the browser once it listens."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import webbrowser

from madmax.errors import ConfigError
from madmax.web.app import Settings, create_app

# Bound to one of these, the server answers only requests addressed to one of them (`Settings.allowed_hosts`).
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# How often, and how long, to wait for the server to listen before opening the browser.
STARTUP_POLL_S = 0.1
STARTUP_WAIT_S = 30.0


def serve(host: str = "127.0.0.1", port: int = 8000, open_browser: bool = True, settings: Settings | None = None,
          log_level: str = "info") -> None:
    """Serve the API and the page until interrupted."""
    import uvicorn

    if not 0 <= port <= 65535:
        raise ConfigError(f"port={port} is not a TCP port; allowed: 0..65535")
    _check_free(host, port)
    settings = settings or Settings()
    if host in LOOPBACK and settings.allowed_hosts is None:
        settings = dataclasses.replace(settings, allowed_hosts=LOOPBACK)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, log_level=log_level))
    if open_browser:
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
        threading.Thread(target=_open_when_started, args=(server, url), daemon=True).start()
    server.run()


def _open_when_started(server, url: str) -> None:
    deadline = time.monotonic() + STARTUP_WAIT_S
    while not server.started and time.monotonic() < deadline:
        time.sleep(STARTUP_POLL_S)
    if server.started:
        webbrowser.open(url)


def _check_free(host: str, port: int) -> None:
    """A sentence now, rather than uvicorn's log line later, for an address that cannot be listened on."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise ConfigError(f"host={host!r} is not an address of this machine; allowed: e.g. 127.0.0.1 or "
                          "0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ConfigError(f"port={port} on {host} cannot be listened on ({exc.strerror}); allowed: a free port, "
                              f"e.g. --port {port + 1 if port < 65535 else 8000}") from None
