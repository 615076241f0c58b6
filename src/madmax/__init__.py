"""madmax: predict how fast large ML models train and serve on distributed GPU systems.

`madmax.simulate(...)`, `madmax.search(...)`, `madmax.inspect(...)`, `madmax.simulate_rl(...)` and
`madmax.search_rl(...)` are the public API (`madmax.api`, `madmax.search.api`, `madmax.rl`, `madmax.rl.search`),
imported on first use so that `import madmax` and `madmax --help` stay fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["inspect", "search", "search_rl", "simulate", "simulate_rl"]


def __getattr__(name: str) -> Any:
    if name in ("simulate", "inspect"):
        from madmax import api

        return getattr(api, name)
    if name == "simulate_rl":
        from madmax.rl import simulate_rl

        return simulate_rl
    if name == "search_rl":
        from madmax.rl.search import search_rl

        return search_rl
    if name == "search":  # the package, which calls madmax.search.search
        import madmax.search

        return madmax.search
    raise AttributeError(f"module 'madmax' has no attribute {name!r}")
