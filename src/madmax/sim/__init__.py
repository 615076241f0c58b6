"""The stream scheduler: timed tasks on streams with dependencies -> a timeline. Knows nothing of models."""

from madmax.sim.engine import Schedule, Timeline

__all__ = ["Schedule", "Timeline"]
