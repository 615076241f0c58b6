"""Fixtures of the web tests: an app in a TestClient, a live server on a free port, and a headless Chromium
(the system's /usr/bin/chromium, driven by Playwright; the browser tests skip without either)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest


def _web():
    """madmax.web, or a skip where its extra (fastapi, uvicorn) is not installed."""
    pytest.importorskip("fastapi", reason="the web app needs fastapi (pip install madmax[web])")
    import madmax.web

    return madmax.web

CHROMIUM = Path(os.environ.get("MADMAX_CHROMIUM", "/usr/bin/chromium"))
# Chromium's flags for a closed network and a root user (docs: env/machines python.md).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    web = _web()
    from fastapi.testclient import TestClient

    settings = web.Settings(data_dir=tmp_path_factory.mktemp("web-data"), workers=2)
    with TestClient(web.create_app(settings)) as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return _free_port()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory):
    """The app served by uvicorn in a thread of this process; yields its base URL."""
    web = _web()
    uvicorn = pytest.importorskip("uvicorn")
    port = _free_port()
    app = web.create_app(web.Settings(data_dir=tmp_path_factory.mktemp("live-data"), workers=2))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the live server did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright (madmax[dev])")
    with sync_api.sync_playwright() as p:  # launch() gives Chromium a new empty profile (--user-data-dir)
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()
