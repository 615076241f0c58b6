"""Results: metrics, breakdown and memory assembled from a program's timeline and its builder's labels."""

from madmax.results.breakdown import stream_breakdown
from madmax.results.training import Result

__all__ = ["Result", "stream_breakdown"]
