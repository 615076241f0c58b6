"""Search the strategy space of a model x system x task for the fastest, cheapest or greenest strategy.

`madmax.search.search(...)`, also callable as `madmax.search(...)`: the package itself calls `search`.
"""

import sys
import types

from madmax.search.api import search

__all__ = ["search"]


class _Callable(types.ModuleType):
    """This package, callable: `madmax.search(...)` is `madmax.search.search(...)`."""

    def __call__(self, *args, **kwargs):
        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _Callable
