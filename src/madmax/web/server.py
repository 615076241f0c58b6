"""Run the app with uvicorn on one host and port, and open the page in the browser once it listens."""

from __future__ import annotations

import threading
import time
import webbrowser

from madmax.errors import ConfigError
from madmax.web.app import Settings, create_app

# How often, and how long, to wait for the server to listen before opening the browser.
STARTUP_POLL_S = 0.1
STARTUP_WAIT_S = 30.0


def serve(host: str = "127.0.0.1", port: int = 8000, open_browser: bool = True, settings: Settings | None = None,
          log_level: str = "info") -> None:
    """Serve the API and the page until interrupted."""
    import uvicorn

    if not 0 <= port <= 65535:
        raise ConfigError(f"port={port} is not a TCP port; allowed: 0..65535")
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
