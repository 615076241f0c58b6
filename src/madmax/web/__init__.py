"""`madmax web`: an HTTP API over `madmax.api` and a page to plan a run by looking at it (needs madmax[web]).

    from madmax.web import create_app, serve
    serve(host="127.0.0.1", port=8000)        # what `madmax web` runs

See docs/web.md for the endpoints. FastAPI and uvicorn load only when this package is imported.
"""

from madmax.web.app import Settings, create_app
from madmax.web.server import serve

__all__ = ["Settings", "create_app", "serve"]
