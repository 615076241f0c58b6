"""The search of a model with embedding tables: the sharding plan jointly with the dense data parallelism.

A recommendation model (its workload has embedding tables) trains its dense MLPs data parallel only
(its family's degree limits: tp = pp = cp = 1) with one micro-batch per rank and iteration
(mbs = B / n for a global batch of B samples on n GPUs: no gradient accumulation), and places its
tables by the embedding-sharding plan (`madmax.parallel.embedding`). A candidate is then:

    emb        tw, rw, cw, twrw, dp or hybrid: how every table is sharded (one type for all tables)
    emb_balance  size, lookup or count, as asked (default size only): what the planner balances when it
               deals whole tables or column slices to ranks (tw, cw and hybrid's model-parallel part,
               `PLACED`); the other types place no table on a chosen rank and take the default (size)
    emb_group  G, the ranks that share one copy of the tables (2-D sharding: the n/G groups hold
               replicas); G is n (column 0, the default) or a proper divisor of n that is a whole
               number of nodes of L ranks (L: the scale-up domain, as the planner counts a node).
               Data-parallel tables are replicated on every rank, so emb=dp takes only G = n.
    zero       ZeRO stage 0-3 of the dense MLPs over all n ranks (shard column 0); with `hybrid`,
               stages 1-3 also with the shard group of one node (shard = L < n: FSDP's HYBRID_SHARD,
               shard inside the node, replicate across nodes)

so with k proper divisors of n that are multiples of L and b balances (1 unless asked), there are (3 b + 2)
(k + 1) + 1 sharding plans and 1 + 3 (1 + h) dense settings (h = 1 with hybrid and L < n, else 0): 6 x 4 =
24 candidates on one node, 26 x 7 = 182 on 128 GPUs of 8 per node (all three balances: 12 x 4 = 48 and 56 x
7 = 392; DLRM-A's search on 128 ZionEX GPUs then takes 296 s instead of 162 s, for the same best). Every
candidate is simulated with `madmax.simulate`: the space is small, and the planner's greedy placement (and
its host offload when the tables exceed HBM) has no closed form here. Each is simulated with `emb_offload=1`
(rows beyond HBM may stay in host memory); its strategy string keeps the key only where its plan does
offload (column `emb_offload`), so a plan that holds every row in HBM prints, and re-simulates to, the same
result without it. Hybrid groups other than one node are not tried: the planner runs inside every simulation
and takes most of its time, so each shard size would cost a full pass over the plans. A candidate is counted
under the first rule it breaks:

    embedding_plan  the sharding planner refuses the plan (e.g. column-wise slices wider than a table)
    memory          the simulated plan does not fit in HBM (`fits` false)

A global batch that n does not divide leaves no candidate: it is bad input (ConfigError).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from madmax.config.strategy import DEFAULT_ORDER, EMB_BALANCES, EMB_SHARDINGS, Recompute
from madmax.errors import ConfigError, StrategyError
from madmax.results import Result
from madmax.search.context import Context
from madmax.search.core import Outcome, ranking, simulate_many
from madmax.search.objective import Scorer
from madmax.search.space import COLUMNS, RECOMPUTES, Space, divisors, strategy_strings

TABLE_COLUMNS = (*COLUMNS, "emb", "emb_group", "emb_bal")
# Shardings whose planner deals whole tables or column slices to ranks, so emb_balance moves them
# (`madmax.parallel.embedding`): row-wise, table-row-wise and data-parallel tables land where their type says.
PLACED = ("tw", "cw", "hybrid")
TABLE_RULES = ("embedding_plan",)
DENSE_AXES = ("tp", "pp", "cp")  # degrees a table model's family must fix at 1 for this space
PLANNER_PREFIX = "embedding "  # how the planner's StrategyErrors begin (`parallel.embedding._check`)


@dataclass(frozen=True)
class TableLimits:
    """User filters of a table search: sharding types, ZeRO stages, and whether to try one-node shard groups."""

    emb: tuple[str, ...] = EMB_SHARDINGS
    balance: tuple[str, ...] = EMB_BALANCES[:1]  # size only unless asked: each other balance re-plans every placed plan
    zero: tuple[int, ...] = (0, 1, 2, 3)
    hybrid: bool = True
    max_tp: int = 1  # tensor parallelism of the MLPs, inside a scale-up domain


def node_groups(num_gpus: int, ranks_per_node: int) -> list[int]:
    """Proper divisors of the GPU count that are whole numbers of nodes: the 2-D group sizes."""
    return [g for g in divisors(num_gpus) if g < num_gpus and g % ranks_per_node == 0]


def enumerate_tables(ctx: Context, limits: TableLimits) -> dict[str, np.ndarray]:
    """Every candidate of the module docstring as integer columns (TABLE_COLUMNS; `emb` indexes
    EMB_SHARDINGS, `emb_group` and `shard` 0 mean all ranks), sharding plans outermost."""
    degree_limit = dict(ctx.problem().max_degree)
    assert all(degree_limit.get(axis) == 1 for axis in DENSE_AXES if axis != "tp"), \
        f"the table search enumerates data and tensor parallelism only; {ctx.spec.name} allows {degree_limit}"
    n = ctx.num_gpus
    local = min(ctx.domain, n)
    tps = [t for t in divisors(local) if t <= limits.max_tp and (ctx.global_batch // (n // t)) % t == 0]
    plans = [(EMB_SHARDINGS.index(e), g, EMB_BALANCES.index(b)) for e in limits.emb
             for g in [0, *node_groups(n, local)] if e != "dp" or g == 0
             for b in (limits.balance if e in PLACED else EMB_BALANCES[:1])]
    shards = [0, local] if limits.hybrid and local < n else [0]
    dense = [(0, 0)] if 0 in limits.zero else []
    dense += [(z, s) for z in limits.zero if z > 0 for s in shards]
    rows = np.array([(t, e, g, b, z, s) for t in tps for e, g, b in plans for z, s in dense
                     if s == 0 or (n // t) % s == 0],
                    dtype=np.int32).reshape(-1, 6)
    fixed = {"cp": 1, "pp": 1, "vp": 1, "m": 1, "rec": RECOMPUTES.index(Recompute.NONE), "order": 0, "ep": 1, "etp": 1,
             "epo": 0}
    cols = {name: np.full(len(rows), value, dtype=np.int32) for name, value in fixed.items()}
    tp = rows[:, 0]
    cols.update(tp=tp, dp=n // tp, mbs=ctx.global_batch // (n // tp), sp=(tp > 1).astype(np.int32),
                emb=rows[:, 1], emb_group=rows[:, 2], emb_bal=rows[:, 3], zero=rows[:, 4], shard=rows[:, 5])
    return {name: cols[name] for name in TABLE_COLUMNS}


def _offloads(result: Result) -> bool:
    """Whether a simulated plan keeps embedding rows in host memory (its table unit's offloaded bytes)."""
    return any(isinstance(v, dict) and v.get("offloaded_bytes_per_gpu", 0) > 0 for v in result.breakdown.values())


def run_table_search(ctx: Context, limits: TableLimits, scorer: Scorer, *, workers: int = 1,
                     timings: dict[str, float] | None = None) -> Outcome:
    """Enumerate, simulate every candidate (in `workers` processes), drop those the planner refuses or
    that do not fit, and rank the rest by the objective. Returns an `Outcome` whose candidates are all
    simulated (`exact` holds every evaluated one; `estimate_s` is the simulated time)."""
    if ctx.global_batch % ctx.num_gpus:
        raise ConfigError(f"global_batch={ctx.global_batch} is not a multiple of num_gpus={ctx.num_gpus}; "
                          f"{ctx.spec.name} trains one micro-batch of global_batch/num_gpus samples per rank; "
                          f"allowed: a multiple of {ctx.num_gpus}")
    timings = dict(timings or {})
    start = time.perf_counter()
    cols = enumerate_tables(ctx, limits)
    orders = (DEFAULT_ORDER,)
    strategies = [str(s) for s in strategy_strings(cols, orders)] if len(cols["tp"]) else []
    timings["enumerate"] = time.perf_counter() - start
    start = time.perf_counter()
    # One candidate per task: their times differ tenfold (the planner's cost varies with emb and emb_group).
    results = simulate_many(ctx, strategies, workers, refused=(StrategyError,), chunksize=1)
    timings["simulate"] = time.perf_counter() - start
    for r in results:
        if isinstance(r, StrategyError) and not str(r).startswith(PLANNER_PREFIX):
            raise AssertionError(f"the table search enumerated a strategy that simulate refuses: {r}")
    planned = np.array([i for i, r in enumerate(results) if isinstance(r, Result)], dtype=np.int64)
    # Every candidate may keep rows in host memory (emb_offload=1); the strings say so where its plan does.
    cols["emb_offload"] = np.array([int(_offloads(r)) if isinstance(r, Result) else 1 for r in results],
                                   dtype=np.int32)
    fit = np.array([i for i in planned if results[i].fits], dtype=np.int64)
    space = Space(columns={k: v[planned] for k, v in cols.items()}, enumerated=len(results),
                  rejected={"embedding_plan": len(results) - len(planned)}, orders=orders)
    exact: dict[int, Result] = {j: results[i] for j, i in enumerate(fit)}
    t = np.array([r.iteration_time_s for r in exact.values()], dtype=float)
    peak_flops = ctx.system.gpu.flops_per_s[ctx.dtype] * ctx.num_gpus
    return Outcome(ctx=ctx, scorer=scorer, space=space, columns={k: v[fit] for k, v in cols.items()},
                   peak_memory_bytes=np.array([r.peak_memory_bytes for r in exact.values()], dtype=float),
                   estimate_s=t, refined_s=np.full(len(t), np.nan), exact=exact,
                   ranked=ranking(scorer, t, np.full(len(t), np.nan), exact),
                   rejected={**space.rejected, "memory": len(planned) - len(fit)},
                   model_flops=np.array([r.mfu for r in exact.values()], dtype=float) * t * peak_flops,
                   timings_s=timings)
