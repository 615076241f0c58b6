"""The strategy space of one model x system x task, enumerated as columns and pruned by divisibility.

A candidate is a full strategy: degrees tp, cp, pp (dp = GPUs / (tp*cp*pp), derived, so the degrees
always multiply to the GPU count), virtual stages vp, micro-batch size mbs, ZeRO stage 0-3 with its
sharding group (`shard`, hybrid sharding; 0 here means the whole data-parallel group), recompute
none/selective/full, sequence parallelism (both settings when tp > 1) and the placement order.

The space is the product of each axis' natural range: tp, cp, pp over the ordered factorizations of
the GPU count, vp in 1..layers, mbs over the divisors of the global batch, then the options (ZeRO x
shard in divisors(dp), recompute, sp, order). The rules of `resolve_strategy` then reject candidates,
each rejection counted under the first rule it breaks, in `resolve_strategy`'s own order:

    tp_divides_model   tp divides num_heads, num_kv_heads and ffn_hidden_size
    degree_limit       no degree above the largest the model family is modelled for
    pp_vp_layers       pp*vp <= num_layers
    vp_needs_pp        vp > 1 only with pp > 1
    cp_divides_seq     cp divides seq_len
    batch_divisible    dp*mbs divides the global batch
    interleaved_m      vp > 1 needs the micro-batches per replica to be a multiple of pp

so that enumerated = sum of the rejections + the candidates that pass. `tests/search` checks that
these vectorized rules accept exactly what `resolve_strategy` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations

import numpy as np

from madmax.config.strategy import DEFAULT_ORDER, EMB_SHARDINGS, Recompute, Strategy
from madmax.errors import ConfigError

RECOMPUTES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
RULES = ("tp_divides_model", "degree_limit", "pp_vp_layers", "vp_needs_pp", "cp_divides_seq", "batch_divisible",
         "interleaved_m")
COLUMNS = ("tp", "cp", "pp", "dp", "vp", "mbs", "m", "zero", "shard", "rec", "sp", "order")
MAX_CANDIDATES = 10_000_000  # a search peaks near 350 bytes per candidate (0.7 GB for 2 million)


def all_orders() -> tuple[str, ...]:
    """Every placement of tp, cp, dp, pp from innermost to outermost (ep, of degree 1, after cp)."""
    found = []
    for perm in permutations(("tp", "cp", "dp", "pp")):
        axes = list(perm)
        axes.insert(axes.index("cp") + 1, "ep")
        found.append("-".join(axes))
    return tuple(sorted(found, key=lambda o: (o != DEFAULT_ORDER, o)))


@dataclass(frozen=True)
class Limits:
    """User filters that shrink the space before it is counted (not rejections)."""

    max_tp: int | None = None
    max_cp: int | None = None
    max_pp: int | None = None
    max_vp: int | None = None
    max_mbs: int | None = None
    zero: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[Recompute, ...] = RECOMPUTES
    sp: tuple[bool, ...] = (True, False)
    hybrid: bool = True  # enumerate every sharding group (else only the whole dp group)
    orders: tuple[str, ...] = (DEFAULT_ORDER,)


@dataclass(frozen=True)
class Problem:
    """The sizes the rules need: GPUs, global batch, sequence, layers and the tp constraints."""

    num_gpus: int
    global_batch: int
    seq_len: int
    num_layers: int
    tp_sizes: tuple[int, ...]  # model sizes tp must divide (heads, kv heads, ffn width)
    max_degree: tuple[tuple[str, int], ...] = ()  # (axis, largest degree the model family is modelled for)


@dataclass
class Space:
    """Candidates that pass the divisibility rules, as integer columns (see COLUMNS), and the counts."""

    columns: dict[str, np.ndarray]
    enumerated: int
    rejected: dict[str, int] = field(default_factory=dict)
    orders: tuple[str, ...] = (DEFAULT_ORDER,)

    def __len__(self) -> int:
        return len(self.columns["tp"])

    def take(self, index: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[index] for k, v in self.columns.items()}


def unique_rows(cols: dict[str, np.ndarray], names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of the named columns (as an int matrix, sorted) and each candidate's row index."""
    key = np.zeros(len(cols[names[0]]), dtype=np.int64)
    span = 1
    for name in names:  # mixed radix over non-negative integer columns, re-densified before it overflows
        col = cols[name].astype(np.int64)
        radix = int(col.max(initial=0)) + 1
        if span * radix >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            key = key.ravel().astype(np.int64)
            span = int(key.max(initial=0)) + 1
        key = key * radix + col
        span *= radix
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    values = np.stack([cols[n][first].astype(np.int64) for n in names], axis=1)
    return values, inverse.ravel()


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _capped(values: list[int], cap: int | None) -> list[int]:
    return [v for v in values if cap is None or v <= cap]


def _degrees(problem: Problem, limits: Limits) -> np.ndarray:
    """Ordered factorizations tp*cp*pp*dp = GPUs within the limits: rows (tp, cp, pp, dp)."""
    n = problem.num_gpus
    rows = []
    for tp in _capped(divisors(n), limits.max_tp):
        for cp in _capped(divisors(n // tp), limits.max_cp):
            for pp in _capped(divisors(n // (tp * cp)), limits.max_pp):
                rows.append((tp, cp, pp, n // (tp * cp * pp)))
    return np.array(rows, dtype=np.int32).reshape(-1, 4)


def _option_count(dp: np.ndarray, tp: np.ndarray, limits: Limits) -> np.ndarray:
    """Candidates one (degrees, vp, mbs) row stands for: ZeRO x shard, recompute, sp, order choices."""
    values, where = np.unique(dp, return_inverse=True)
    num_div = np.array([len(divisors(int(d))) if limits.hybrid else 1 for d in values], dtype=np.int32)[where]
    zero_shard = (0 in limits.zero) + sum(z > 0 for z in limits.zero) * num_div
    sp = np.where(tp > 1, len(limits.sp), 1)
    return zero_shard.astype(np.int64) * len(limits.recompute) * sp * len(limits.orders)


def _rule_failures(problem: Problem, tp, cp, pp, dp, vp, mbs) -> list[np.ndarray]:
    """One boolean column per rule of RULES: True where the candidate breaks that rule."""
    b = problem.global_batch
    tp_bad = np.zeros(len(tp), dtype=bool)
    for size in problem.tp_sizes:
        tp_bad |= size % tp != 0
    degree = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": np.ones_like(tp)}
    limit_bad = np.zeros(len(tp), dtype=bool)
    for axis, limit in problem.max_degree:
        limit_bad |= degree[axis] > limit
    batch_bad = b % (dp * mbs) != 0
    m = np.where(batch_bad, 1, b // (dp * mbs))
    return [tp_bad, limit_bad, pp * vp > problem.num_layers, (vp > 1) & (pp == 1), problem.seq_len % cp != 0,
            batch_bad, (vp > 1) & (m % pp != 0)]


def first_broken_rule(problem: Problem, tp, cp, pp, vp, mbs) -> np.ndarray:
    """Index into RULES of the first rule each candidate breaks, -1 where it breaks none.

    Arrays of degrees whose product tp*cp*pp divides the GPU count (dp is derived from it).
    """
    tp, cp, pp, vp, mbs = (np.asarray(a, dtype=np.int64) for a in (tp, cp, pp, vp, mbs))
    dp = problem.num_gpus // (tp * cp * pp)
    out = np.full(len(tp), -1)
    for index, bad in reversed(list(enumerate(_rule_failures(problem, tp, cp, pp, dp, vp, mbs)))):
        out[bad] = index
    return out


def enumerate_space(problem: Problem, limits: Limits) -> Space:
    """Every candidate of the space, the count per rule of those rejected, and the ones that pass."""
    deg = _degrees(problem, limits)
    vps = np.array(_capped(list(range(1, problem.num_layers + 1)), limits.max_vp), dtype=np.int32)
    mbss = np.array(_capped(divisors(problem.global_batch), limits.max_mbs), dtype=np.int32)
    # Rows: degrees x vp x mbs; each stands for `weight` candidates (the options).
    i, j, k = (a.ravel() for a in np.meshgrid(np.arange(len(deg)), np.arange(len(vps)), np.arange(len(mbss)),
                                              indexing="ij"))
    tp, cp, pp, dp = (deg[i, c] for c in range(4))
    vp, mbs = vps[j], mbss[k]
    weight = _option_count(dp, tp, limits)
    alive = np.ones(len(tp), dtype=bool)
    rejected = {}
    for rule, bad in zip(RULES, _rule_failures(problem, tp, cp, pp, dp, vp, mbs), strict=True):
        hit = alive & bad
        rejected[rule] = int(weight[hit].sum())
        alive &= ~bad
    valid = int(weight[alive].sum())
    if valid > MAX_CANDIDATES:
        raise ConfigError(f"the strategy space has {valid:,} valid candidates, more than the {MAX_CANDIDATES:,} "
                          "a search holds in memory; allowed: narrow it with max_cp, max_vp, max_pp, zero or orders")
    columns = _expand(problem, limits, *(a[alive] for a in (tp, cp, pp, dp, vp, mbs)))
    return Space(columns=columns, enumerated=int(weight.sum()), rejected=rejected, orders=limits.orders)


def _expand(problem: Problem, limits: Limits, tp, cp, pp, dp, vp, mbs) -> dict[str, np.ndarray]:
    """Rows that pass x their options, as columns."""
    # ZeRO x shard per distinct dp: shard 0 = the whole group (the default), else a proper divisor.
    zs_of: dict[int, np.ndarray] = {}
    for d in np.unique(dp):
        opts = [(0, 0)] if 0 in limits.zero else []
        shards = [s for s in divisors(int(d)) if s < d] if limits.hybrid else []
        opts += [(z, s) for z in limits.zero if z > 0 for s in [0, *shards]]
        zs_of[int(d)] = np.array(opts, dtype=np.int32).reshape(-1, 2)
    recs = np.array([RECOMPUTES.index(r) for r in limits.recompute], dtype=np.int32)
    sps = np.array(sorted({int(s) for s in limits.sp}), dtype=np.int32)
    pieces: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    for d, zs in zs_of.items():
        for multi_tp in (False, True):
            rows = np.flatnonzero((dp == d) & ((tp > 1) == multi_tp))
            if not len(rows) or not len(zs):
                continue
            sp_opts = sps if multi_tp else np.array([0], dtype=np.int32)
            grid = np.array(np.meshgrid(np.arange(len(zs)), recs, sp_opts, np.arange(len(limits.orders)),
                                        indexing="ij")).reshape(4, -1)
            r = np.repeat(rows, grid.shape[1])
            g = np.tile(grid, len(rows))
            for name, col in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp), ("vp", vp), ("mbs", mbs)):
                pieces[name].append(col[r])
            pieces["zero"].append(zs[g[0], 0])
            pieces["shard"].append(zs[g[0], 1])
            pieces["rec"].append(g[1])
            pieces["sp"].append(g[2])
            pieces["order"].append(g[3])
            pieces["m"].append(problem.global_batch // (dp[r] * mbs[r]))
    return {c: (np.concatenate(v) if v else np.zeros(0, dtype=np.int32)) for c, v in pieces.items()}


def strategy_of(row: dict[str, int], orders: tuple[str, ...]) -> Strategy:
    """The Strategy of one candidate row (column values as ints; `emb`, `emb_group` where present)."""
    # Searched plans may keep table rows beyond HBM in host memory (a plan that fits is unaffected).
    tables = ({"emb": EMB_SHARDINGS[row["emb"]], "emb_group": row["emb_group"] or None, "emb_offload": True}
              if "emb" in row else {})
    return Strategy(tp=row["tp"], pp=row["pp"], dp=row["dp"], cp=row["cp"], vp=row["vp"], mbs=row["mbs"],
                    zero=row["zero"], shard=row["shard"] or None, recompute=RECOMPUTES[row["rec"]],
                    sp=bool(row["sp"]), order=orders[row["order"]], **tables)


def _emb_text(emb: int, group: int) -> str:
    """The embedding keys of a candidate with tables: `,emb=tw`, plus `,emb_group=G` in 2-D sharding."""
    return f",emb={EMB_SHARDINGS[emb]}" + (f",emb_group={group}" if group else "") + ",emb_offload=1"


def describe(row: dict[str, int], orders: tuple[str, ...]) -> str:
    """The strategy string of one candidate: `Strategy.describe()`, plus the order when not the default
    and the embedding sharding of a model with tables (which `Strategy.describe` leaves out)."""
    text = strategy_of(row, orders).describe()
    order = orders[row["order"]]
    text = text if order == DEFAULT_ORDER else f"{text},order={order}"
    return text + _emb_text(row["emb"], row["emb_group"]) if "emb" in row else text


def strategy_strings(cols: dict[str, np.ndarray], orders: tuple[str, ...]) -> np.ndarray:
    """`describe` of every candidate (an object array), built from the distinct parts of the strings."""
    parts = []
    for names, text in (
        (("tp", "pp", "dp", "cp"), lambda tp, pp, dp, cp: f"tp={tp},pp={pp},dp={dp},cp={cp},ep=1"),
        (("vp", "mbs"), lambda vp, mbs: f",vp={vp},mbs={mbs}"),
        (("zero", "shard", "rec", "sp", "order"), lambda zero, shard, rec, sp, order: (
            f",zero={zero}" + (f",shard={shard}" if shard else "") + f",recompute={RECOMPUTES[rec].value},sp={sp}"
            + ("" if orders[order] == DEFAULT_ORDER else f",order={orders[order]}"))),
    ):
        values, index = unique_rows(cols, names)
        parts.append(np.array([text(*(int(x) for x in v)) for v in values], dtype=object)[index])
    if "emb" in cols and len(cols["emb"]):
        values, index = unique_rows(cols, ("emb", "emb_group"))
        parts.append(np.array([_emb_text(int(e), int(g)) for e, g in values], dtype=object)[index])
    return sum(parts[1:], parts[0])

