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
    layout = [(name, 1 if Axis(name) is Axis.EP else strategy.degree(Axis(name))) for name in strategy.order.split("-")]
    return _span(layout, {str(a) for a in axes}, domain_size)


def expert_span(strategy: Strategy, axes: tuple[str, ...], domain_size: int) -> Span:
    """Ranks of an expert group over `axes` ("etp", "ep", "edp"): the experts fold over the tp*cp*dp ranks
    of a stage numbered in `strategy.expert_order` from innermost (default etp-ep-edp, Megatron-Core's
    expert rank order), pipeline outermost. With the default an EP group of ep ranks sits inside one
    scale-up domain when etp*ep divides it."""
    ranks = strategy.tp * strategy.cp * (strategy.dp or 1)
    degree = {"etp": strategy.etp, "ep": strategy.ep, "edp": ranks // (strategy.ep * strategy.etp)}
    layout = [(name, degree[name]) for name in strategy.expert_order.split("-")] + [("pp", strategy.pp)]
    return _span(layout, set(axes), domain_size)


def _span(layout: list[tuple[str, int]], axes: set[str], domain_size: int) -> Span:
    stride = 1
    intra = 1
    size = 1
    for name, degree in layout:
        if name in axes:
            size *= degree
            if stride < domain_size:
                intra *= max(1, min(degree, domain_size // stride))
        stride *= degree
    intra = min(intra, size)
    return Span(intra=intra, inter=size // intra)
