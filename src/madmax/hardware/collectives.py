"""Collective communication cost model: alpha-beta with participant counts, hierarchical across domains.

For a group of n GPUs, a message of S bytes (nccl-tests size convention, below), a per-step latency
alpha (s) and an achievable bus bandwidth B (bytes/s per GPU per direction, nccl-tests "busbw"):

    all_reduce (ring)             t = 2(n-1) alpha + 2(n-1)/n * S / B
    all_gather, reduce_scatter    t =  (n-1) alpha +  (n-1)/n * S / B
    all_to_all                    t = c alpha + (n-1) t_p + (n-1)/n * S / B
    send_recv                     t =        alpha +            S / B

A ring passes its data in n - 1 steps, one after another; NCCL's all-to-all posts the send and receive of
every peer at once (grouped point-to-point), so its latency is one exchange (c alpha: the fabric's `c`
of efficiency.yaml `collectives.all_to_all`) and a small cost per peer (t_p), not n - 1 steps.

Sizes (nccl-tests doc/PERFORMANCE.md): all_reduce: the buffer per GPU; all_gather: the gathered output
per GPU; reduce_scatter: the input per GPU before the scatter; all_to_all: the bytes each GPU sends and
keeps in total; send_recv: the message.

A group spans `Span(intra, inter)`: `intra` GPUs in each of `inter` scale-up domains (n = intra*inter).
Pure intra groups use the scale-up fabric (NVLink), pure inter groups (intra == 1) the scale-out
fabric (NICs). A group over both runs hierarchically, as NCCL does across nodes:
all_reduce = reduce_scatter inside each domain (S) + all_reduce across domains (S/intra, every GPU on
its own NIC, so B_out is per GPU) + all_gather inside (S); all_gather = all_gather across domains
(output S/intra) + inside (S); reduce_scatter the mirror; all_to_all sends (intra-1)/n of S over the
scale-up and intra*(inter-1)/n of S over the scale-out fabric at the same time, and lasts as long as
the slower one (the scale-out part with the scale-out fabric's c alpha and all n - 1 peers' t_p);
send_recv between domains uses the scale-out fabric.

A full-mesh scale-up domain (`ScaleUp.topology`, AMD Instinct boards: one xGMI link from each GPU to each of
its D - 1 peers) gives a group of n GPUs inside it n - 1 links: its peak is bytes_per_s (n - 1) / (D - 1), so a
tensor-parallel pair gets one link's bandwidth and a group of all eight every link. RCCL runs its rings over
those links (several rings, one per link direction; ROCm/rccl src/graph), so the ring formulas above hold with
B = that peak x the busbw fraction; send_recv between two GPUs uses their one link.

alpha is the fabric's `latency_s` from the system description. B = fabric peak * busbw fraction, the
fraction from `catalog/efficiency.yaml` by fabric kind, GPU and collective (nccl-tests measurements).
A calibration profile's measured collectives (`network`, from `madmax calibrate` on nccl-tests output)
replace both for their collective and fabric: a group of n takes the fit measured at the largest size
<= n (GPUs on one node, nodes across them), or the smallest one for a smaller group.
Sources: Thakur, Rabenseifner, Gropp, IJHPCA 19(1), 2005 (ring algorithms); nccl-tests
doc/PERFORMANCE.md (busbw); NCCL's hierarchical (tree/NVLS-tree) algorithms for the 2-level form.

At scale (docs/model.md, "Behaviour at scale"):
- The all-reduce across m > 1 domains is the faster of the ring above and NCCL's double binary tree,
  as NCCL's tuner picks (src/graph/tuning.cc):
      tree all_reduce             t = 2 floor(log2 m) alpha_tree + 2 * S / B_tree
  alpha_tree = alpha * `tree.hop_latency_factor`, B_tree = B * `tree.busbw_factor` (efficiency.yaml).
  The ring's latency grows with m, the tree's with log m: small all-reduces over thousands of GPUs
  take the tree, large gradient buckets the ring.
- The scale-out network is a rail-optimized fat tree (`ScaleOut`): the members of a group sit at the
  same positions in every domain (the rank order of `madmax.parallel.placement`), so each GPU's
  traffic stays on its own rail. A group whose nodes fit under one leaf switch (`nodes_per_leaf`)
  stays on the leaf; a larger one crosses the spine: B / `spine_oversubscription` and alpha +
  `spine_latency_s`. The group's nodes are counted as if packed (inter domains of
  ceil(intra / gpus_per_node) nodes each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from madmax.collective import Collective, Span
from madmax.config.hardware import Fabric, ScaleUp, ScaleUpTopology, System
from madmax.config.units import parse_quantity
from madmax.errors import ConfigError
from madmax.hardware.profile import efficiency_table


def ring_all_reduce_s(size_bytes: float, n: int, busbw_bytes_per_s: float, step_latency_s: float) -> float:
    """Ring all-reduce of `size_bytes` per GPU among `n` GPUs: t = 2(n-1) alpha + 2(n-1)/n * S / B.

    B: achievable bus bandwidth per GPU per direction (nccl-tests busbw, so the second term is S/algbw);
    alpha: latency of one ring step. Sources: Thakur et al. 2005; nccl-tests doc/PERFORMANCE.md.
    """
    if n == 1:
        return 0.0
    return 2 * (n - 1) * step_latency_s + 2 * (n - 1) / n * size_bytes / busbw_bytes_per_s


def ring_gather_s(size_bytes: float, n: int, busbw_bytes_per_s: float, step_latency_s: float) -> float:
    """Ring all-gather (S = gathered output per GPU) or reduce-scatter (S = input per GPU):
    t = (n-1) alpha + (n-1)/n * S / B. Each GPU sends and receives (n-1)/n of S. Sources: Thakur et al.
    2005; nccl-tests doc/PERFORMANCE.md."""
    if n == 1:
        return 0.0
    return (n - 1) * step_latency_s + (n - 1) / n * size_bytes / busbw_bytes_per_s


def all_to_all_s(size_bytes: float, n: int, busbw_bytes_per_s: float, latency_s: float) -> float:
    """All-to-all of S bytes per GPU (what each sends, its own share included) among n ranks once its
    latency is known (`_Level.all_to_all_latency_s`): t = L + (n-1)/n * S / B."""
    if n == 1:
        return 0.0
    return latency_s + (n - 1) / n * size_bytes / busbw_bytes_per_s


def send_recv_s(size_bytes: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Point-to-point message: t = alpha + S / B (B per direction)."""
    return latency_s + size_bytes / bandwidth_bytes_per_s


def tree_all_reduce_s(size_bytes: float, n: int, busbw_bytes_per_s: float, hop_latency_s: float) -> float:
    """Double-binary-tree all-reduce of `size_bytes` per GPU among `n` ranks (one per domain):
    t = 2 floor(log2 n) alpha + 2 S / B -- a reduce up and a broadcast down trees of depth log2 n,
    each rank sending and receiving S per direction (NCCL's tuning model, src/graph/tuning.cc: tree
    latency 2 log2i(nNodes) hwLat, algorithm bandwidth busBw / 2)."""
    if n == 1:
        return 0.0
    return 2 * max(1, n.bit_length() - 1) * hop_latency_s + 2 * size_bytes / busbw_bytes_per_s


Steps = tuple[tuple[int, float], ...]  # ((min_ranks, fraction), ...) sorted by min_ranks


def _steps(value: Any, where: str) -> Steps:
    """A busbw fraction from efficiency.yaml: a number, or {min_ranks: fraction}."""
    table = value if isinstance(value, dict) else {1: value}
    steps = tuple(sorted((int(n), float(f)) for n, f in table.items()))
    if not steps or steps[0][0] != 1 or not all(f > 0 for _, f in steps):
        raise ConfigError(f"efficiency.yaml {where}={value!r}: need fractions > 0 and an entry from 1 rank")
    return steps


def _fraction(steps: Steps, n: int) -> float:
    return next(f for min_ranks, f in reversed(steps) if min_ranks <= n)


@dataclass(frozen=True)
class _Level:
    """One fabric of a system: peak per GPU per direction, step latency, busbw fractions by collective;
    `latencies`: measured step latencies of some collectives by group size (a profile's fits)."""

    bytes_per_s: float
    latency_s: float
    fractions: dict[str, Steps]
    latencies: dict[str, Steps] = field(default_factory=dict)
    mesh_peers: int = 0  # D - 1 on a full mesh of D GPUs (one link per peer), 0 on a switch
    a2a_alphas: float = 1.0  # c: the all-to-all's exchange latency in alphas (efficiency.yaml collectives.all_to_all)
    a2a_peer_s: float = 0.0  # t_p: the all-to-all's cost per peer

    def busbw(self, kind: str, n: int) -> float:
        """B of `kind` over a group of n: peak x busbw fraction, on a full mesh of the n - 1 links the group
        reaches (peak (n - 1) / (D - 1), `ScaleUp.group_bytes_per_s`)."""
        return self.busbw_peak(n) * _fraction(self.fractions[kind], n)

    def busbw_peak(self, n: int) -> float:
        """Peak per GPU per direction a group of n reaches: bytes_per_s, or (n - 1) of D - 1 mesh links."""
        links = (min(n, self.mesh_peers + 1) - 1) / self.mesh_peers if self.mesh_peers and n > 1 else 1.0
        return self.bytes_per_s * links

    def latency(self, kind: str, n: int) -> float:
        """alpha of `kind` over a group of n: the measured one where a fit gives it, else the fabric's."""
        steps = self.latencies.get(kind)
        return self.latency_s if steps is None else _fraction(steps, n)

    def all_to_all_latency_s(self, n: int, measured_at: int) -> float:
        """L of an all-to-all among n ranks: c alpha + (n - 1) t_p, or, where a profile measured this
        fabric's all-to-all, the latency of its fit at the largest measured size <= `measured_at` (GPUs on
        one node, nodes across them)."""
        steps = self.latencies.get(str(Collective.ALL_TO_ALL))
        if steps is not None:
            return _fraction(steps, measured_at)
        return self.a2a_alphas * self.latency_s + (n - 1) * self.a2a_peer_s

    def crossing_spine(self, oversubscription: float, extra_latency_s: float) -> _Level:
        """The level as seen by traffic that crosses an oversubscribed, farther spine tier."""
        latencies = {k: tuple((n, a + extra_latency_s) for n, a in steps) for k, steps in self.latencies.items()}
        return _Level(self.bytes_per_s / oversubscription, self.latency_s + extra_latency_s, self.fractions,
                      latencies, self.mesh_peers, self.a2a_alphas, self.a2a_peer_s)


@dataclass(frozen=True)
class _Net:
    """One system's network: its levels, the spine variant of the scale-out level and its layout."""

    up: _Level
    out: _Level
    spine: _Level
    domain: int
    gpus_per_node: int
    nodes_per_leaf: int | None
    tree_hop_factor: float
    tree_busbw_factor: float

    def across(self, intra: int, inter: int) -> _Level:
        """The scale-out level a group of `inter` domains uses: the leaf if its nodes fit under one."""
        nodes = inter * -(-intra // self.gpus_per_node)
        return self.out if self.nodes_per_leaf is None or nodes <= self.nodes_per_leaf else self.spine

    def all_reduce_across_s(self, level: _Level, size_bytes: float, m: int) -> float:
        """All-reduce over m domains: NCCL's choice of ring or tree, whichever is faster."""
        busbw, alpha = level.busbw(Collective.ALL_REDUCE, m), level.latency(Collective.ALL_REDUCE, m)
        ring = ring_all_reduce_s(size_bytes, m, busbw, alpha)
        tree = tree_all_reduce_s(size_bytes, m, busbw * self.tree_busbw_factor, alpha * self.tree_hop_factor)
        return min(ring, tree)


def _level(fabric: Fabric, gpu_names: set[str], label: str) -> tuple[_Level, list[str]]:
    """The fabric's busbw fractions: a GPU-specific entry, else the fabric kind's, else `default`."""
    table = efficiency_table()["collectives"]
    kind = str(fabric.kind)
    entry, used = None, kind
    for override in table.get("gpus", []):
        if override["fabric"] == kind and gpu_names & {name.lower() for name in override["names"]}:
            entry, used = override, f"{kind} of {'/'.join(override['names'])}"
            break
    if entry is None:
        entry = table["fabrics"].get(kind)
    if entry is None:
        entry, used = table["fabrics"]["default"], "default"
    notes = []
    if entry.get("assumed"):
        notes.append(f"{label} fabric {kind}: {used} busbw fractions are assumed ({entry['source']})")
    fractions = {str(c): _steps(entry["busbw_fraction"][str(c)], f"{kind}.{c}") for c in Collective}
    mesh = isinstance(fabric, ScaleUp) and fabric.topology is ScaleUpTopology.FULL_MESH
    peers = fabric.domain_size - 1 if mesh else 0
    alphas, peer_s, assumed = _all_to_all_terms(kind)
    if assumed:
        notes.append(f"{label} fabric {kind}: the all-to-all's latency ({alphas:g} alpha + {peer_s * 1e6:g} us "
                     "per peer) is assumed, measured on NVLink and InfiniBand only (efficiency.yaml "
                     "collectives.all_to_all)")
    return _Level(fabric.bytes_per_s, fabric.latency_s, fractions, mesh_peers=peers, a2a_alphas=alphas,
                  a2a_peer_s=peer_s), notes


def _all_to_all_terms(kind: str) -> tuple[float, float, bool]:
    """(c, t_p, assumed) of the all-to-all's latency c alpha + (n - 1) t_p on a fabric kind
    (efficiency.yaml `collectives.all_to_all`: its `alphas` by kind, else `default`)."""
    table = efficiency_table()["collectives"]["all_to_all"]
    alphas = table["alphas"]
    known = kind in alphas
    return float(alphas[kind if known else "default"]), parse_quantity(table["per_peer"], "s"), \
        not known or kind in table.get("assumed", ())


_KINDS = tuple(str(c) for c in Collective)

# Registry of networks, so that the per-message cache is keyed by small ints and plain numbers.
_NETWORKS: list[_Net] = []


@lru_cache(maxsize=1 << 18)
def _collective_s(net: int, kind: str, size_bytes: float, intra: int, inter: int) -> float:
    if kind not in _KINDS:
        raise ConfigError(f"collective {kind!r} is unknown; allowed: {', '.join(_KINDS)}")
    if size_bytes < 0:
        raise ConfigError(f"collective size_bytes={size_bytes} must be >= 0")
    network = _NETWORKS[net]
    if intra > network.domain:
        raise ConfigError(f"span intra={intra} exceeds the scale-up domain of {network.domain} GPUs")
    n = intra * inter
    if n == 1 or size_bytes == 0:
        return 0.0
    up, out = network.up, network.across(intra, inter)
    if kind == Collective.SEND_RECV:
        level = out if inter > 1 else up
        return send_recv_s(size_bytes, level.busbw(kind, 2), level.latency(kind, 2))
    if kind == Collective.ALL_TO_ALL and (inter == 1 or intra == 1):
        level, measured_at = (up, intra) if inter == 1 else (out, inter)
        return all_to_all_s(size_bytes, n, level.busbw(kind, measured_at), level.all_to_all_latency_s(n, measured_at))
    if inter == 1:
        ring = ring_all_reduce_s if kind == Collective.ALL_REDUCE else ring_gather_s
        return ring(size_bytes, intra, up.busbw(kind, intra), up.latency(kind, intra))
    if intra == 1:
        if kind == Collective.ALL_REDUCE:
            return network.all_reduce_across_s(out, size_bytes, inter)
        return ring_gather_s(size_bytes, inter, out.busbw(kind, inter), out.latency(kind, inter))
    return _hierarchical_s(network, out, kind, size_bytes, intra, inter)


def _hierarchical_s(network: _Net, out: _Level, kind: str, s: float, intra: int, inter: int) -> float:
    """A group over intra > 1 GPUs in each of inter > 1 domains (see the module docstring)."""
    up = network.up
    rs, ag = Collective.REDUCE_SCATTER, Collective.ALL_GATHER
    inside = {c: ring_gather_s(s, intra, up.busbw(c, intra), up.latency(c, intra)) for c in (rs, ag)}
    if kind == Collective.ALL_REDUCE:
        return inside[rs] + network.all_reduce_across_s(out, s / intra, inter) + inside[ag]
    if kind in (rs, ag):
        # NCCL's ring passes every rank: n-1 steps, inter-1 of them between domains. The two rings above
        # count (intra-1) + (inter-1); the other (intra-1)(inter-1) steps inside the domains come on top.
        extra = (intra - 1) * (inter - 1) * up.latency(kind, intra)
        return inside[kind] + ring_gather_s(s / intra, inter, out.busbw(kind, inter), out.latency(kind, inter)) + extra
    # all_to_all: (intra-1) peers inside the domain, n-intra outside, both fabrics at once
    n = intra * inter
    t_up = up.all_to_all_latency_s(intra, intra) + (intra - 1) / n * s / up.busbw(kind, intra)
    t_out = out.all_to_all_latency_s(n, inter) + (n - intra) / n * s / out.busbw(kind, n)
    return max(t_up, t_out)


@dataclass(frozen=True, eq=False)
class NetworkModel:
    """Collective times on one system. Build it with `network_model(system)` (cached per system).

    `assumptions` lists the busbw fractions that are defaults rather than measurements.
    """

    system: System
    fits: tuple[Any, ...] = ()
    assumptions: tuple[str, ...] = field(init=False, default=())
    _net: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        gpu = self.system.gpu
        names = {gpu.name.lower()}
        up, up_notes = _level(self.system.scale_up, names, "scale-up")
        out, out_notes = _level(self.system.scale_out, names, "scale-out")
        up, out = _with_fits(up, out, self.fits)
        fabric = self.system.scale_out
        tree = efficiency_table()["collectives"]["tree"]
        _NETWORKS.append(_Net(up=up, out=out,
                              spine=out.crossing_spine(fabric.spine_oversubscription or 1.0,
                                                       fabric.spine_latency_s or 0.0),
                              domain=self.system.scale_up.domain_size, gpus_per_node=self.system.gpus_per_node,
                              nodes_per_leaf=fabric.nodes_per_leaf,
                              tree_hop_factor=float(tree["hop_latency_factor"]),
                              tree_busbw_factor=float(tree["busbw_factor"])))
        object.__setattr__(self, "_net", len(_NETWORKS) - 1)
        object.__setattr__(self, "assumptions", tuple(up_notes + out_notes + _fabric_notes(self.system)))

    def collective_s(self, kind: Collective, size_bytes: float, span: Span) -> float:
        """Seconds of one collective of `size_bytes` (nccl-tests convention) over `span`; 0 for n = 1."""
        return _collective_s(self._net, kind, size_bytes, span.intra, span.inter)

    def host_s(self, num_bytes: float) -> float:
        """Seconds to move `num_bytes` over the GPU-host link: t = alpha + S / B (the system's
        host_link; ConfigError if the system describes none)."""
        if not num_bytes:
            return 0.0
        link = self.system.host_link
        if link is None:
            raise ConfigError(f"system {self.system.name} has no host_link: embedding rows offloaded to host "
                              "memory need its bandwidth; give host_link in the system file")
        return send_recv_s(num_bytes, link.bytes_per_s, link.latency_s)

    def busbw_bytes_per_s(self, kind: Collective, span: Span) -> float:
        """Achievable bus bandwidth per GPU per direction of the fabric a pure group uses (bytes/s)."""
        network = _NETWORKS[self._net]
        if span.inter == 1:
            return network.up.busbw(kind, span.size)
        return network.across(span.intra, span.inter).busbw(kind, span.inter)


def _fabric_notes(system: System) -> list[str]:
    """What the scale-out description leaves to defaults, for the result's assumptions (without
    `nodes_per_leaf` the system describes one switch tier, which is no assumption of the model)."""
    fabric = system.scale_out
    if fabric.nodes_per_leaf is None:
        return []
    notes = []
    if fabric.spine_oversubscription is None:
        notes.append(f"scale-out fabric of {system.name}: the spine above {fabric.nodes_per_leaf} nodes is assumed "
                     "non-blocking (no spine_oversubscription given)")
    if str(system.sources.get("scale_out.spine_latency_s", "ESTIMATE")).startswith("ESTIMATE"):
        notes.append(f"scale-out fabric of {system.name}: the spine's extra latency "
                     f"{(fabric.spine_latency_s or 0.0) * 1e6:g} us per message is an estimate")
    return notes


def _with_fits(up: _Level, out: _Level, fits: tuple[Any, ...]) -> tuple[_Level, _Level]:
    """Levels with measured collectives (a calibration profile's `network`) in place of the table.

    A fit measured on one node sets the scale-up fabric's busbw (as a fraction of its peak) and step
    latency for its collective, for groups from its number of GPUs up; one measured across nodes sets the
    scale-out fabric's, from its number of nodes up. The fit of the smallest size also covers smaller
    groups; of two fits of one size the last wins. The last fit's step latency is also the fabric's for
    the collectives measured by no fit, an all-to-all's excepted: its fitted latency is its whole latency L
    (`_Level.all_to_all_latency_s`), not a step.
    """
    by_size: dict[tuple[str, str], dict[int, Any]] = {}
    latency = {"up": up.latency_s, "out": out.latency_s}
    for fit in fits:
        which, size = ("up", fit.num_gpus) if fit.num_nodes == 1 else ("out", fit.num_nodes)
        by_size.setdefault((which, str(fit.collective)), {})[size] = fit
        if str(fit.collective) != Collective.ALL_TO_ALL:
            latency[which] = fit.step_latency_s
    levels = {which: _Level(level.bytes_per_s, latency[which], dict(level.fractions), dict(level.latencies),
                            level.mesh_peers, level.a2a_alphas, level.a2a_peer_s)
              for which, level in (("up", up), ("out", out))}
    for (which, kind), sized in by_size.items():
        level, sizes = levels[which], sorted(sized)
        starts = [1, *sizes[1:]]  # the smallest measured size also stands for smaller groups
        # The fit's busbw is measured on its group: as a fraction of what that group's links carry (on a full
        # mesh, n - 1 of D - 1 links), so that busbw() gives it back for the measured size.
        level.fractions[kind] = tuple((start, sized[n].busbw_bytes_per_s / level.busbw_peak(n))
                                      for start, n in zip(starts, sizes, strict=True))
        level.latencies[kind] = tuple((start, sized[n].step_latency_s) for start, n in zip(starts, sizes, strict=True))
    return levels["up"], levels["out"]


def _system_key(system: System) -> tuple:
    up, out = system.scale_up, system.scale_out
    return (system.name, system.gpu.name, system.gpus_per_node, str(up.kind), up.bytes_per_s, up.latency_s,
            up.domain_size, str(up.topology), str(out.kind), out.bytes_per_s, out.latency_s, out.nodes_per_leaf,
            out.spine_oversubscription, out.spine_latency_s, system.sources.get("scale_out.spine_latency_s"))


_MODELS: dict[tuple, NetworkModel] = {}


def network_model(system: System, fits: tuple[Any, ...] = ()) -> NetworkModel:
    """The (cached) network model of `system`; the cluster size does not enter it.

    fits: measured collectives (`CollectiveFit` of a calibration profile) overriding the busbw table.
    """
    key = (_system_key(system), tuple(id(f) for f in fits))
    model = _MODELS.get(key)
    if model is None:
        model = _MODELS[key] = NetworkModel(system, tuple(fits))
    return model
