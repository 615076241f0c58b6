"""Placement of the parallel axes on the network hierarchy.

Ranks are numbered with the axes of `Strategy.order` from innermost to outermost (Megatron's default
order tp-cp-ep-dp-pp puts TP innermost, so a TP group sits inside one NVLink domain when tp divides
the domain). The ranks of a collective over a set of axes vary those axes' coordinates only; how
many of them share a scale-up domain decides which fabric carries the traffic.
"""

from __future__ import annotations

from madmax.collective import Span
from madmax.config.strategy import Axis, Strategy


def span(strategy: Strategy, axes: tuple[Axis, ...], domain_size: int) -> Span:
    """Ranks of a group over `axes`: how many per scale-up domain (`intra`) and how many domains.

    An axis of degree d and stride st (product of the degrees inside it) has min(d, D/st) of its
    coordinates inside one domain of D consecutive ranks when st < D, else one. The group's intra
    count is the product over its axes; `inter` is the group size divided by it.
    """
    stride = 1
    intra = 1
    size = 1
    for name in strategy.order.split("-"):
        axis = Axis(name)
        degree = 1 if axis is Axis.EP else strategy.degree(axis)
        if axis in axes:
            size *= degree
            if stride < domain_size:
                intra *= max(1, min(degree, domain_size // stride))
        stride *= degree
    intra = min(intra, size)
    return Span(intra=intra, inter=size // intra)
