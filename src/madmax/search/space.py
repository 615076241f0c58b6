"""The strategy space of one model x system x task, enumerated as columns and pruned by divisibility.

A candidate is a full strategy: degrees tp, cp, pp (dp = GPUs / (tp*cp*pp), derived, so the degrees
always multiply to the GPU count), virtual stages vp, micro-batch size mbs, ZeRO stage 0-3 with its
sharding group (`shard`, hybrid sharding; 0 here means the whole data-parallel group), recompute
none/selective/full, sequence parallelism (both settings when tp > 1) and the placement order. A
mixture-of-experts model adds the expert degrees ep and etp, folded over the tp*cp*dp ranks of a stage,
and the two-micro-batch overlap of their all-to-all (`epo`, column of `ep_overlap`).

The space is the product of each axis' natural range: tp, cp, pp over the ordered factorizations of
the GPU count; with experts, (ep, etp) over the pairs whose product divides tp*cp*dp (etp > 1 only
with ep > 1: it splits the experts ep places), and epo both ways when ep > 1; vp in 1..layers, mbs over
the divisors of the global batch, then the options (ZeRO x shard in divisors(dp), recompute, sp,
order). The rules of `resolve_strategy` then reject candidates, each rejection counted under the first
rule it breaks, in `resolve_strategy`'s own order:

    tp_divides_model     tp divides num_heads, num_kv_heads and ffn_hidden_size
    ep_divides_experts   ep divides moe.num_experts                              (experts only)
    etp_divides_experts  etp divides moe.expert_ffn_hidden_size                  (experts only)
    experts_need_sp      tp > 1 needs sequence parallelism before the dispatch   (experts only)
    degree_limit         no degree above the largest the model family is modelled for
    pp_vp_layers         pp*vp <= num_layers
    vp_needs_pp          vp > 1 only with pp > 1
    cp_divides_seq       cp divides seq_len
    batch_divisible      dp*mbs divides the global batch
    schedule_steps       micro-batches per replica x pp x vp <= MAX_SCHEDULE_STEPS (what the simulator schedules)
    ep_overlap_m         ep_overlap needs two micro-batches per replica           (experts only)
    interleaved_m        vp > 1 needs the micro-batches per replica to be a multiple of pp

so that enumerated = sum of the rejections + the candidates that pass. `tests/search` checks that
these vectorized rules accept exactly what `resolve_strategy` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations

import numpy as np

from madmax.config.checks import MAX_SCHEDULE_STEPS
from madmax.config.strategy import DEFAULT_ORDER, EMB_BALANCES, EMB_SHARDINGS, Recompute, Strategy
from madmax.errors import ConfigError

RECOMPUTES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
RULES = ("tp_divides_model", "degree_limit", "pp_vp_layers", "vp_needs_pp", "cp_divides_seq", "batch_divisible",
         "schedule_steps", "interleaved_m")
EXPERT_RULES = ("tp_divides_model", "ep_divides_experts", "etp_divides_experts", "experts_need_sp", "degree_limit",
                "pp_vp_layers", "vp_needs_pp", "cp_divides_seq", "batch_divisible", "schedule_steps", "ep_overlap_m",
                "interleaved_m")
COLUMNS = ("tp", "cp", "pp", "dp", "vp", "mbs", "m", "zero", "shard", "rec", "sp", "order", "ep", "etp", "epo")
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
    max_ep: int | None = None
    max_etp: int | None = None
    ep_overlap: tuple[bool, ...] = (False, True)  # two-micro-batch overlap of the expert all-to-all


@dataclass(frozen=True)
class Problem:
    """The sizes the rules need: GPUs, global batch, sequence, layers and the tp, ep, etp constraints."""

    num_gpus: int
    global_batch: int
    seq_len: int
    num_layers: int
    tp_sizes: tuple[int, ...]  # model sizes tp must divide (heads, kv heads, ffn width)
    max_degree: tuple[tuple[str, int], ...] = ()  # (axis, largest degree the model family is modelled for)
    has_experts: bool = False  # a mixture-of-experts model: ep, etp and ep_overlap are searched
    ep_sizes: tuple[int, ...] = ()  # model sizes ep must divide (routed experts)
    etp_sizes: tuple[int, ...] = ()  # model sizes etp must divide (an expert's width)

    @property
    def rules(self) -> tuple[str, ...]:
        return EXPERT_RULES if self.has_experts else RULES


@dataclass
class Space:
    """Candidates that pass the divisibility rules, as integer columns (see COLUMNS), and the counts.

    valid: how many pass, when `columns` holds only some of them (a bounded search); None: all.
    """

    columns: dict[str, np.ndarray]
    enumerated: int
    rejected: dict[str, int] = field(default_factory=dict)
    orders: tuple[str, ...] = (DEFAULT_ORDER,)
    valid: int | None = None

    def __len__(self) -> int:
        return len(self.columns["tp"])

    @property
    def num_valid(self) -> int:
        return len(self) if self.valid is None else self.valid

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
    """Ordered factorizations tp*cp*pp*dp = GPUs within the limits, each with the expert choices of its
    tp*cp*dp ranks (`_experts`): rows (tp, cp, pp, dp, ep, etp, epo)."""
    n = problem.num_gpus
    rows = []
    for tp in _capped(divisors(n), limits.max_tp):
        for cp in _capped(divisors(n // tp), limits.max_cp):
            for pp in _capped(divisors(n // (tp * cp)), limits.max_pp):
                dp = n // (tp * cp * pp)
                rows += [(tp, cp, pp, dp, *e) for e in _experts(problem, limits, tp * cp * dp)]
    return np.array(rows, dtype=np.int32).reshape(-1, 7)


def _experts(problem: Problem, limits: Limits, ranks: int) -> list[tuple[int, int, int]]:
    """(ep, etp, epo) over a stage's `ranks`: ep*etp divides them, etp > 1 only with ep > 1, and the
    all-to-all overlap (epo) only where there is an all-to-all (ep > 1); (1, 1, 0) without experts."""
    if not problem.has_experts:
        return [(1, 1, 0)]
    overlaps = sorted({int(o) for o in limits.ep_overlap})
    out = []
    for ep in _capped(divisors(ranks), limits.max_ep):
        etps = _capped(divisors(ranks // ep), limits.max_etp) if ep > 1 else [1]
        out += [(ep, etp, epo) for etp in etps for epo in (overlaps if ep > 1 else [0])]
    return out


def _option_count(dp: np.ndarray, tp: np.ndarray, limits: Limits) -> np.ndarray:
    """Candidates one (degrees, vp, mbs) row stands for: ZeRO x shard, recompute, sp, order choices."""
    values, where = np.unique(dp, return_inverse=True)
    num_div = np.array([len(divisors(int(d))) if limits.hybrid else 1 for d in values], dtype=np.int32)[where]
    zero_shard = (0 in limits.zero) + sum(z > 0 for z in limits.zero) * num_div
    sp = np.where(tp > 1, len(limits.sp), 1)
    return zero_shard.astype(np.int64) * len(limits.recompute) * sp * len(limits.orders)


def _rule_failures(problem: Problem, tp, cp, pp, dp, vp, mbs, ep, etp, epo, sp=None) -> list[np.ndarray]:
    """One boolean column per rule of `problem.rules`: True where the candidate breaks that rule.

    sp: sequence parallelism of each candidate; None for rows that stand for both settings, where
    `experts_need_sp` marks the rows whose sp=0 options break it.
    """
    b = problem.global_batch
    tp_bad = np.zeros(len(tp), dtype=bool)
    for size in problem.tp_sizes:
        tp_bad |= size % tp != 0
    degree = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": ep}
    limit_bad = np.zeros(len(tp), dtype=bool)
    for axis, limit in problem.max_degree:
        limit_bad |= degree[axis] > limit
    batch_bad = b % (dp * mbs) != 0
    m = np.where(batch_bad, 1, b // (dp * mbs))
    failures = {"tp_divides_model": tp_bad, "degree_limit": limit_bad, "pp_vp_layers": pp * vp > problem.num_layers,
                "vp_needs_pp": (vp > 1) & (pp == 1), "cp_divides_seq": problem.seq_len % cp != 0,
                "batch_divisible": batch_bad, "schedule_steps": m * pp * vp > MAX_SCHEDULE_STEPS,
                "interleaved_m": (vp > 1) & (m % pp != 0)}
    if problem.has_experts:
        failures["ep_divides_experts"] = np.zeros(len(tp), dtype=bool)
        for size in problem.ep_sizes:
            failures["ep_divides_experts"] |= size % ep != 0
        failures["etp_divides_experts"] = np.zeros(len(tp), dtype=bool)
        for size in problem.etp_sizes:
            failures["etp_divides_experts"] |= size % etp != 0
        failures["experts_need_sp"] = (tp > 1) & (True if sp is None else ~np.asarray(sp, dtype=bool))
        failures["ep_overlap_m"] = (epo > 0) & (m < 2)
    return [failures[rule] for rule in problem.rules]


def first_broken_rule(problem: Problem, tp, cp, pp, vp, mbs, ep=None, etp=None, epo=None, sp=None) -> np.ndarray:
    """Index into `problem.rules` of the first rule each candidate breaks, -1 where it breaks none.

    Arrays of degrees whose product tp*cp*pp divides the GPU count (dp is derived from it); the expert
    degrees (default 1, no overlap) with ep*etp dividing tp*cp*dp; sp (default on).
    """
    tp, cp, pp, vp, mbs = (np.asarray(a, dtype=np.int64) for a in (tp, cp, pp, vp, mbs))
    ep, etp, epo = (np.full(len(tp), d, dtype=np.int64) if a is None else np.asarray(a, dtype=np.int64)
                    for a, d in ((ep, 1), (etp, 1), (epo, 0)))
    sp = np.ones(len(tp), dtype=bool) if sp is None else np.asarray(sp, dtype=bool)
    dp = problem.num_gpus // (tp * cp * pp)
    out = np.full(len(tp), -1)
    failures = _rule_failures(problem, tp, cp, pp, dp, vp, mbs, ep, etp, epo, sp)
    for index, bad in reversed(list(enumerate(failures))):
        out[bad] = index
    return out


ROW_COLUMNS = ("tp", "cp", "pp", "dp", "vp", "mbs", "ep", "etp", "epo")


@dataclass
class Rows:
    """The candidates that pass the divisibility rules, grouped by degrees, vp and mbs (ROW_COLUMNS): each
    row stands for `weight` of them (its options: ZeRO x shard, recompute, sp, order); with the counts."""

    columns: dict[str, np.ndarray]
    weight: np.ndarray
    enumerated: int
    rejected: dict[str, int]

    def __len__(self) -> int:
        return len(self.weight)

    @property
    def valid(self) -> int:
        return int(self.weight.sum())


def enumerate_space(problem: Problem, limits: Limits) -> Space:
    """Every candidate of the space, the count per rule of those rejected, and the ones that pass."""
    rows = enumerate_rows(problem, limits)
    if rows.valid > MAX_CANDIDATES:
        raise ConfigError(f"the strategy space has {rows.valid:,} valid candidates, more than the "
                          f"{MAX_CANDIDATES:,} a search holds in memory; allowed: narrow it with max_cp, max_vp, "
                          "max_pp, zero or orders" + (", max_ep, max_etp or ep_overlap" if problem.has_experts else ""))
    columns = expand(problem, limits, rows)
    assert len(columns["tp"]) == rows.valid
    return Space(columns=columns, enumerated=rows.enumerated, rejected=rows.rejected, orders=limits.orders)


def enumerate_rows(problem: Problem, limits: Limits) -> Rows:
    """Every row of the space, the count per rule of the candidates rejected, and the rows that pass.

    The rules run where they first apply, so that the product is built only of what can pass: those of
    the degrees alone (up to degree_limit) on the degree rows, counted for each of their vp x mbs; then
    those of (pp, vp), counted for each mbs; the rest on the rows of degrees x vp x mbs. Each rejected
    candidate is still counted under the first rule it breaks, in RULES order.
    """
    rules = problem.rules
    deg = _degrees(problem, limits)
    vps = np.array(_capped(list(range(1, problem.num_layers + 1)), limits.max_vp), dtype=np.int32)
    mbss = np.array(_capped(divisors(problem.global_batch), limits.max_mbs), dtype=np.int32)
    tp, cp, pp, dp, ep, etp, epo = (deg[:, c] for c in range(7))
    weight = _option_count(dp, tp, limits) * len(vps) * len(mbss)  # candidates of each degree row
    enumerated = int(weight.sum())
    rejected = dict.fromkeys(rules, 0)
    alive = np.ones(len(deg), dtype=bool)
    ones = np.ones(len(deg), dtype=np.int64)
    failures = dict(zip(rules, _rule_failures(problem, tp, cp, pp, dp, ones, ones, ep, etp, epo), strict=True))
    sp_off = sum(not s for s in limits.sp)
    for rule in rules[:rules.index("degree_limit") + 1]:  # the rules of the degrees alone
        hit = alive & failures[rule]
        if rule == "experts_need_sp":  # only the sp=0 options of these rows break it
            lost = weight[hit] // len(limits.sp) * sp_off
            rejected[rule] = int(lost.sum())
            weight[hit] -= lost
            alive &= weight > 0
            continue
        rejected[rule] = int(weight[hit].sum())
        alive &= ~hit
    # (pp, vp): the vp of each pipeline depth that pass pp*vp <= layers and vp > 1 only with pp > 1.
    per_row = weight // (len(vps) * len(mbss))  # candidates of each degree row x vp x mbs
    pp_alive = pp[alive]
    too_deep = (pp_alive[:, None] * vps[None, :]) > problem.num_layers
    flat = ~too_deep & (vps[None, :] > 1) & (pp_alive[:, None] == 1)
    rejected["pp_vp_layers"] = int((too_deep.sum(axis=1) * per_row[alive]).sum()) * len(mbss)
    rejected["vp_needs_pp"] = int((flat.sum(axis=1) * per_row[alive]).sum()) * len(mbss)
    d_idx, v_idx = np.nonzero(~too_deep & ~flat)
    d_idx = np.flatnonzero(alive)[d_idx]
    # Rows: degrees x vp (that pass) x mbs; each stands for `per_row` candidates (the options).
    i = np.repeat(d_idx, len(mbss))
    vp = np.repeat(vps[v_idx], len(mbss))
    mbs = np.tile(mbss, len(d_idx))
    tp, cp, pp, dp, ep, etp, epo = (deg[i, c] for c in range(7))
    weight = per_row[i]
    keep = np.ones(len(i), dtype=bool)
    later = rules[rules.index("vp_needs_pp") + 1:]
    failures = _rule_failures(problem, tp, cp, pp, dp, vp, mbs, ep, etp, epo)
    for rule, bad in zip(rules, failures, strict=True):
        if rule in later:
            rejected[rule] = int(weight[keep & bad].sum())
            keep &= ~bad
    columns = dict(zip(ROW_COLUMNS, (a[keep] for a in (tp, cp, pp, dp, vp, mbs, ep, etp, epo)), strict=True))
    return Rows(columns=columns, weight=weight[keep], enumerated=enumerated, rejected=rejected)


def expand(problem: Problem, limits: Limits, rows: Rows, index: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The candidates of the rows (those at `index`, default all) x their options, as columns."""
    cols = rows.columns if index is None else {k: v[index] for k, v in rows.columns.items()}
    return _expand(problem, limits, *(cols[name] for name in ROW_COLUMNS))


def _expand(problem: Problem, limits: Limits, tp, cp, pp, dp, vp, mbs, ep, etp, epo) -> dict[str, np.ndarray]:
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
    if problem.has_experts:  # tensor parallelism of an MoE model needs sp (experts_need_sp)
        sps = sps[sps == 1]
    pieces: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    for d, zs in zs_of.items():
        for multi_tp in (False, True):
            rows = np.flatnonzero((dp == d) & ((tp > 1) == multi_tp))
            sp_opts = sps if multi_tp else np.array([0], dtype=np.int32)
            if not len(rows) or not len(zs) or not len(sp_opts):
                continue
            grid = np.array(np.meshgrid(np.arange(len(zs)), recs, sp_opts, np.arange(len(limits.orders)),
                                        indexing="ij")).reshape(4, -1)
            r = np.repeat(rows, grid.shape[1])
            g = np.tile(grid, len(rows))
            for name, col in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp), ("vp", vp), ("mbs", mbs), ("ep", ep),
                              ("etp", etp), ("epo", epo)):
                pieces[name].append(col[r])
            pieces["zero"].append(zs[g[0], 0])
            pieces["shard"].append(zs[g[0], 1])
            pieces["rec"].append(g[1])
            pieces["sp"].append(g[2])
            pieces["order"].append(g[3])
            pieces["m"].append(problem.global_batch // (dp[r] * mbs[r]))
    return {c: (np.concatenate(v) if v else np.zeros(0, dtype=np.int32)) for c, v in pieces.items()}


def strategy_of(row: dict[str, int], orders: tuple[str, ...], fp8_params: bool = False) -> Strategy:
    """The Strategy of one candidate row (column values as ints; `emb`, `emb_group` where present), with the
    search's `fp8_params`."""
    # Searched plans may keep table rows beyond HBM in host memory (a plan that fits is unaffected).
    tables = ({"emb": EMB_SHARDINGS[row["emb"]], "emb_group": row["emb_group"] or None, "emb_offload": True,
               "emb_balance": EMB_BALANCES[row.get("emb_bal", 0)]} if "emb" in row else {})
    return Strategy(tp=row["tp"], pp=row["pp"], dp=row["dp"], cp=row["cp"], vp=row["vp"], mbs=row["mbs"],
                    zero=row["zero"], shard=row["shard"] or None, recompute=RECOMPUTES[row["rec"]],
                    sp=bool(row["sp"]), order=orders[row["order"]], ep=row.get("ep", 1), etp=row.get("etp", 1),
                    ep_overlap=bool(row.get("epo", 0)), fp8_params=fp8_params, **tables)


def _emb_text(emb: int, group: int, offload: int = 1, balance: int = 0) -> str:
    """The embedding keys of a candidate with tables: `,emb=tw`, plus `,emb_balance=B` when not the default (size),
    `,emb_group=G` in 2-D sharding and `,emb_offload=1` unless its plan keeps every row in HBM (`offload` 0)."""
    return (f",emb={EMB_SHARDINGS[emb]}" + (f",emb_balance={EMB_BALANCES[balance]}" if balance else "")
            + (f",emb_group={group}" if group else "") + (",emb_offload=1" if offload else ""))


def describe(row: dict[str, int], orders: tuple[str, ...], fp8_params: bool = False) -> str:
    """The strategy string of one candidate: `Strategy.describe()`, plus the order when not the default
    and the embedding sharding of a model with tables (which `Strategy.describe` leaves out)."""
    text = strategy_of(row, orders, fp8_params).describe()
    order = orders[row["order"]]
    text = text if order == DEFAULT_ORDER else f"{text},order={order}"
    if "emb" not in row:
        return text
    return text + _emb_text(row["emb"], row["emb_group"], row.get("emb_offload", 1), row.get("emb_bal", 0))


def strategy_strings(cols: dict[str, np.ndarray], orders: tuple[str, ...], fp8_params: bool = False) -> np.ndarray:
    """`describe` of every candidate (an object array), built from the distinct parts of the strings."""
    n = len(cols["tp"])
    cols = {"ep": np.ones(n, dtype=np.int32), "etp": np.ones(n, dtype=np.int32), "epo": np.zeros(n, dtype=np.int32),
            **cols}
    parts = []
    for names, text in (
        (("tp", "pp", "dp", "cp", "ep"), lambda tp, pp, dp, cp, ep: f"tp={tp},pp={pp},dp={dp},cp={cp},ep={ep}"),
        (("vp", "mbs"), lambda vp, mbs: f",vp={vp},mbs={mbs}"),
        (("zero", "shard", "etp", "epo", "rec", "sp", "order"), lambda zero, shard, etp, epo, rec, sp, order: (
            f",zero={zero}" + (f",shard={shard}" if shard else "") + (f",etp={etp}" if etp > 1 else "")
            + (",ep_overlap=1" if epo else "") + (",fp8_params=1" if fp8_params else "")
            + f",recompute={RECOMPUTES[rec].value},sp={sp}"
            + ("" if orders[order] == DEFAULT_ORDER else f",order={orders[order]}"))),
    ):
        values, index = unique_rows(cols, names)
        parts.append(np.array([text(*(int(x) for x in v)) for v in values], dtype=object)[index])
    if "emb" in cols and len(cols["emb"]):
        cols = {"emb_offload": np.ones(n, dtype=np.int32), "emb_bal": np.zeros(n, dtype=np.int32), **cols}
        values, index = unique_rows(cols, ("emb", "emb_group", "emb_offload", "emb_bal"))
        parts.append(np.array([_emb_text(int(e), int(g), int(o), int(b)) for e, g, o, b in values],
                              dtype=object)[index])
    return sum(parts[1:], parts[0])
