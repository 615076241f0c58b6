"""Screenshots of the `madmax web` page for docs/web.md, taken in headless Chromium (the system's, via Playwright).

Serves the app on a free port, opens a simulate, a search and a sweep the way a person would (the URL's
state, the Search and Run sweep buttons), and writes docs/img/web-simulate.png, web-search.png and
web-sweep.png.

    python benchmarks/web_screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from madmax.web import Settings, create_app

# Chromium's flags for a closed network and a root user.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
STATE = {"model": "llama-3-70b", "system": "dgx-h100", "num_gpus": 64, "task": "pretrain", "global_batch": 256,
         "seq_len": 4096, "strategy": "tp=8,pp=4,vp=2", "top": 5, "max_pp": 4}
TIMEOUT_MS = 120_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp(prefix="madmax-web-shots-"))))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}/"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(base + "#" + urllib.parse.urlencode({**STATE, "run": "simulate"}))
            page.wait_for_selector("#timeline-plot .main-svg", timeout=TIMEOUT_MS)
            page.wait_for_timeout(500)  # plotly's transitions
            shot(page, "#run-form", "#simulate-section", args.out / "web-simulate.png")
            page.click("#search-btn")
            page.wait_for_selector("#search-table tbody tr", timeout=TIMEOUT_MS)
            page.wait_for_timeout(500)
            shot(page, "#search-section", "#search-section", args.out / "web-search.png")
            page.click("#sweep-btn")
            page.wait_for_selector("#pareto-plot .main-svg", timeout=TIMEOUT_MS)
            page.wait_for_timeout(500)
            shot(page, "#sweep-section", "#sweep-section", args.out / "web-sweep.png")
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def shot(page, first: str, last: str, path: Path) -> None:
    """A screenshot from the top of `first` to the bottom of `last`, the page's full width."""
    top, bottom, width = page.evaluate(
        """([first, last]) => [document.querySelector(first).getBoundingClientRect().top + window.scrollY,
                               document.querySelector(last).getBoundingClientRect().bottom + window.scrollY,
                               document.documentElement.scrollWidth]""", [first, last])
    clip = {"x": 0, "y": top - 8, "width": width, "height": bottom - top + 16}  # page coordinates
    page.screenshot(path=str(path), clip=clip, full_page=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
