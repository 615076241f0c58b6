"""`madmax web`: its options' errors are one sentence, and it serves the page and the API."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
from typer.testing import CliRunner

from madmax.cli import app

pytest.importorskip("fastapi", reason="the web app needs fastapi (pip install madmax[web])")

STARTUP_S = 30


@pytest.mark.parametrize(("args", "sentence"), [
    (["--port", "99999"], "error: port=99999 is not a TCP port; allowed: 0..65535"),
    (["--workers", "0"], "error: --workers=0 must be a positive number of processes"),
    (["--search-limit", "0"], "error: --search-limit=0 must be a number of seconds above 0, at most 86400"),
    (["--simulate-limit", "-1"], "error: --simulate-limit=-1 must be a number of seconds above 0, at most 86400"),
])
def test_bad_options_are_one_sentence(args, sentence):
    result = CliRunner().invoke(app, ["web", "--no-browser", *args])
    assert result.exit_code == 2
    assert result.output.strip() == sentence


def test_a_port_in_use_is_one_sentence(free_port):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", free_port))
        busy.listen()
        result = CliRunner().invoke(app, ["web", "--no-browser", "--port", str(free_port)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: port={free_port} on 127.0.0.1 cannot be listened on (Address already in "
                                     f"use); allowed: a free port, e.g. --port {free_port + 1}")


def test_madmax_web_serves_the_page_and_the_api(tmp_path, free_port):
    port = free_port
    server = subprocess.Popen([sys.executable, "-m", "madmax", "web", "--no-browser", "--port", str(port),
                               "--data-dir", str(tmp_path), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            try:
                health = urllib.request.urlopen(f"{base}/health", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "madmax web did not start"
                time.sleep(0.1)
        assert b'"workers":1' in health
        page = urllib.request.urlopen(f"{base}/", timeout=5).read().decode()
        assert "<title>madmax: plan a run</title>" in page
    finally:
        server.terminate()
        server.wait(timeout=30)
