"""The stream scheduler: programs (segments on named streams with dependencies) -> a timeline.

Knows nothing of models, tasks or collectives: program builders in `madmax.program` write programs.
"""

from madmax.sim.engine import Schedule, gc_paused, schedule
from madmax.sim.program import Program, Segment

__all__ = ["Program", "Schedule", "Segment", "gc_paused", "schedule"]
