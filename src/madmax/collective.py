"""Collectives as data: which algorithm a group runs and which ranks it spans.

These types sit below both the plan (`madmax.parallel`, which decides what travels over which group)
and the cost models (`madmax.hardware`, which time it); neither owns them. Sizes follow the nccl-tests
convention (doc/PERFORMANCE.md): all_reduce the buffer per GPU, all_gather the gathered output per GPU,
reduce_scatter the input per GPU, all_to_all the bytes each GPU sends and keeps, send_recv the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from madmax.errors import ConfigError


class Collective(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


@dataclass(frozen=True)
class Span:
    """The ranks of one collective group: `intra` ranks per scale-up domain, in `inter` domains."""

    intra: int
    inter: int

    def __post_init__(self) -> None:
        if self.intra < 1 or self.inter < 1:
            raise ConfigError(f"span intra={self.intra}, inter={self.inter}: both must be >= 1")

    @property
    def size(self) -> int:
        """Group size n = intra * inter."""
        return self.intra * self.inter
