"""Search the strategy space of a model x system x task for the fastest, cheapest or greenest strategy."""

from madmax.search.api import search

__all__ = ["search"]
