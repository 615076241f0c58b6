"""`madmax.search.search(...)`: the strategy search as a function; the CLI's `madmax search` calls `find`."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from madmax.config.base import DType
from madmax.config.strategy import DEFAULT_ORDER, DISPATCHERS, EMB_BALANCES, EMB_SHARDINGS, Recompute
from madmax.config.units import GIB
from madmax.errors import ConfigError
from madmax.program import builder_for
from madmax.search.bound import EXHAUSTIVE, run_bounded
from madmax.search.context import Context, prepare
from madmax.search.core import DEEPEP, TP_OVERLAP, Outcome, run_search
from madmax.search.objective import Objective, scorer
from madmax.search.space import RECOMPUTES, Limits, Space, all_orders, enumerate_rows, expand
from madmax.search.tables import TableLimits, run_table_search
from madmax.sim import gc_paused

DEFAULT_EXACT = 20
DEFAULT_REFINE = 2000
# Share of each GPU's usable memory the training search keeps free unless told otherwise. A plan predicted to use
# the last GiB runs out of memory on the first allocation the model does not count (allocator fragmentation beyond
# catalog runtime.yaml's allocator_fragmentation, which GMLake measured at 15% on average and up to 33% of A100-80GB
# memory for eight LLMs under recomputation, offloading and LoRA, Guo et al., ASPLOS 2024, arXiv 2401.08156; a larger
# NCCL buffer; a longer sample). Not fitted: a stated headroom, printed with every search; 0 uses it all.
DEFAULT_MEMORY_MARGIN = 0.05
MAX_MEMORY_MARGIN = 0.5  # a margin of half the memory or more is not headroom


def memory_margin_bytes(value: Any, usable_bytes: float) -> float:
    """Bytes to keep free per GPU: `value` as a share of `usable_bytes` (a number in [0, 0.5), or text '5%'), or
    a quantity of bytes ('4 GiB'); None: DEFAULT_MEMORY_MARGIN. ConfigError naming memory_margin otherwise."""
    from madmax.config.units import parse_quantity

    allowed = (f"allowed: a share of the usable memory below {MAX_MEMORY_MARGIN:g} (0.05 or 5%) or bytes below half of "
               f"it (4 GiB); 0 keeps none free")
    if value is None:
        return DEFAULT_MEMORY_MARGIN * usable_bytes
    share = margin = None
    try:
        if isinstance(value, bool):
            raise ValueError
        if not isinstance(value, str):
            share = float(value)
        elif value.strip().endswith("%"):
            share = float(value.strip()[:-1]) / 100
        else:
            try:
                share = float(value)
            except ValueError:  # a quantity with its unit
                margin = parse_quantity(value.strip(), "bytes")
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"memory_margin={value!r} is not understood; {allowed}") from None
    if share is not None:
        if not 0 <= share < MAX_MEMORY_MARGIN:
            raise ConfigError(f"memory_margin={value!r} is not a share of memory in [0, {MAX_MEMORY_MARGIN:g}); "
                              f"{allowed}")
        return share * usable_bytes
    assert margin is not None
    if not 0 <= margin < MAX_MEMORY_MARGIN * usable_bytes:
        raise ConfigError(f"memory_margin={value!r} is not below half of the {usable_bytes / GIB:,.1f} GiB a GPU can "
                          f"use; {allowed}")
    return margin


def with_memory_margin(ctx: Context, value: Any) -> Context:
    """`ctx` whose GPUs' usable memory is lowered by the margin, for the screen and the simulations alike."""
    gpu = ctx.system.gpu
    usable = gpu.usable_memory_bytes
    margin = memory_margin_bytes(value, usable)
    if margin == 0:
        return ctx
    system = ctx.system.model_copy(update={"gpu": gpu.model_copy(update={"usable_bytes": usable - margin})})
    return replace(ctx, system=system, simulate_kwargs={**ctx.simulate_kwargs, "system": system},
                   memory_margin_bytes=margin)


def with_goodput(outcome: Outcome, system: Any, reliability: Any) -> Outcome:
    """`outcome` with each simulated strategy's `time_to_train` on `system` (the search's, with its price and
    power) under `reliability`, the simulated ones re-ranked by the expected wall clock (`Outcome.objective_value`)."""
    from madmax.config.reliability import load_reliability
    from madmax.results.goodput import time_to_train

    profile = load_reliability(reliability)
    exact = {i: replace(r, time_to_train=time_to_train(r, system, outcome.scorer.tokens, profile))
             for i, r in outcome.exact.items()}
    outcome = replace(outcome, exact=exact)
    simulated = [int(i) for i in outcome.ranked if int(i) in exact]
    order = sorted(simulated, key=lambda i: (not exact[i].fits, outcome.objective_value(i)))
    rest = [int(i) for i in outcome.ranked if int(i) not in exact]
    return replace(outcome, ranked=np.asarray(order + rest, dtype=outcome.ranked.dtype))


@gc_paused()
def find(model: Any, system: Any, num_gpus: int | None = None, task: Any = "pretrain",
         global_batch: int | None = None, seq_len: int | None = None, dtype: str | None = None, *,
         objective: str = "throughput", tokens: float | None = None, top: int = 10, exact: int | None = None,
         refine: int = DEFAULT_REFINE, max_tp: int | None = None, max_pp: int | None = None,
         max_cp: int | None = None, max_vp: int | None = None, max_mbs: int | None = None,
         zero: list[int] | None = None, recompute: list[str] | None = None, sp: list[bool] | None = None,
         hybrid: bool = True, orders: list[str] | str | None = None, emb: list[str] | None = None,
         max_ep: int | None = None, max_etp: int | None = None, ep_overlap: list[bool] | None = None,
         tp_overlap: list[bool] | None = None, dispatcher: list[str] | None = None,
         emb_balance: list[str] | None = None,
         calibration: str | Path | None = None, workers: int = 1, stack: str | None = None,
         fp8_params: bool = False, price: float | None = None, power: float | None = None,
         reliability: str | Path | dict | None = None, memory_margin: float | str | None = None,
         **task_fields: Any) -> Outcome:
    """Search every valid strategy; see `search` for the arguments. Returns the full `Outcome`.

    With `tokens` and a time, cost or energy objective, each simulated strategy carries its `time_to_train` (the
    goodput model under `reliability`, default llama3-h100) and they rank by its expected wall clock; the
    estimates before them rank by the ideal time (the same GPUs, model and state: goodput moves every candidate
    alike but for its checkpoint interval's rounding)."""
    ctx = prepare(model, system, num_gpus, task, global_batch, seq_len, dtype, calibration=calibration, stack=stack,
                  **{k: v for k, v in task_fields.items() if v is not None})
    ctx = with_memory_margin(ctx, memory_margin)
    # Settings the screen does not cost, tried on the simulated candidates (`core.simulated_variants`). Not by
    # default: each re-simulates those candidates (the README's Llama-3.1-70B search on 64 H100 takes 34 s instead
    # of 19 s with tp_overlap, for a 2.5% faster best).
    ctx = replace(ctx, tp_overlap=_switches("tp_overlap", tp_overlap, "TP overlap settings", (False,)),
                  dispatchers=_choices("dispatcher", dispatcher, DISPATCHERS, "token dispatchers", DISPATCHERS[:1]))
    if fp8_params:
        zero = _fp8_params_zeros(ctx, zero)
        ctx = replace(ctx, fp8_params=True)
    if top < 1:
        raise ConfigError(f"top={top} must be a positive number of strategies to report")
    exact = max(DEFAULT_EXACT, 2 * top) if exact is None else exact
    if exact < top:
        raise ConfigError(f"exact={exact} must be at least top={top} (the reported strategies are simulated)")
    if refine < 1:
        raise ConfigError(f"refine={refine} must be a positive number of candidates to replay")
    if workers < 1:
        raise ConfigError(f"workers={workers} must be a positive number of processes")
    for name, value in (("max_tp", max_tp), ("max_pp", max_pp), ("max_cp", max_cp)):
        if value is not None and value < 1:
            raise ConfigError(f"{name}={value} must be a positive integer")
    costed = ctx.system.with_costs(price, power)
    score = scorer(objective, costed, ctx.tokens, tokens)
    goodput = tokens is not None and score.objective is not Objective.THROUGHPUT
    if reliability is not None and not goodput:
        raise ConfigError("reliability applies to the time to train a token budget; allowed: give tokens and "
                          "objective time, cost or energy")
    if goodput:  # a bad profile is refused before the search runs
        from madmax.config.reliability import load_reliability

        reliability = load_reliability(reliability)
    experts = {"max_ep": max_ep, "max_etp": max_etp, "ep_overlap": ep_overlap, "dispatcher": dispatcher}
    if not ctx.has_experts and (given := [name for name, value in experts.items() if value is not None]):
        raise ConfigError(f"{given[0]} applies to mixture-of-experts models; {ctx.spec.name} has no routed experts; "
                          "allowed: omit it")
    if not builder_for(ctx.task.kind, ctx.workload).fast_estimate(ctx.workload):
        # No closed form for this workload: every candidate of its space is simulated. Today that is a
        # model with embedding tables, searched over its sharding plan (`search.tables`).
        # pp = cp = 1 there (the family's degree limits); tensor parallelism of the MLPs is searched up to
        # max_tp (default 1: data-parallel MLPs, the common layout).
        given = [name for name, value in (("max_vp", max_vp), ("max_mbs", max_mbs), ("recompute", recompute),
                                          ("sp", sp), ("orders", orders), ("tp_overlap", tp_overlap))
                 if value is not None]
        if given:
            raise ConfigError(f"{given[0]} applies to transformer searches; {ctx.spec.name} has embedding tables "
                              "and is searched over emb, emb_balance, emb_group and zero; allowed: omit it")
        # one balance (size, the planner's default) unless asked: each other one re-plans the placed plans
        limits = TableLimits(emb=_choices("emb", emb, EMB_SHARDINGS, "embedding shardings", EMB_SHARDINGS),
                             balance=_choices("emb_balance", emb_balance, EMB_BALANCES, "table-placement balances",
                                              EMB_BALANCES[:1]),
                             zero=_zeros(zero), hybrid=hybrid, max_tp=max_tp or 1)
        outcome = run_table_search(ctx, limits, score, workers=workers)
        return with_goodput(outcome, costed, reliability) if goodput else outcome
    for name, value in (("emb", emb), ("emb_balance", emb_balance)):
        if value is not None:
            raise ConfigError(f"{name}={list(value)} applies to models with embedding tables; {ctx.spec.name} has "
                              "none; allowed: omit it")
    limits = _limits(max_tp, max_pp, max_cp, max_vp, max_mbs, zero, recompute, sp, hybrid, orders)
    limits = replace(limits, **_expert_limits(max_ep, max_etp, ep_overlap))
    start = time.perf_counter()
    problem = ctx.problem()
    rows = enumerate_rows(problem, limits)
    options = {"refine_count": refine, "exact": exact, "workers": workers}
    if rows.valid > EXHAUSTIVE:  # too many to evaluate each: rows bounded below, the best first
        outcome = run_bounded(ctx, problem, limits, rows, score, **options,
                              timings={"enumerate": time.perf_counter() - start})
        return with_goodput(outcome, costed, reliability) if goodput else outcome
    space = Space(columns=expand(problem, limits, rows), enumerated=rows.enumerated, rejected=rows.rejected,
                  orders=limits.orders)
    timings = {"enumerate": time.perf_counter() - start}
    outcome = run_search(ctx, space, score, **options, timings=timings)
    return with_goodput(outcome, costed, reliability) if goodput else outcome


def _limits(max_tp, max_pp, max_cp, max_vp, max_mbs, zero, recompute, sp, hybrid, orders) -> Limits:
    for name, value in (("max_tp", max_tp), ("max_pp", max_pp), ("max_cp", max_cp), ("max_vp", max_vp),
                        ("max_mbs", max_mbs)):
        if value is not None and value < 1:
            raise ConfigError(f"{name}={value} must be a positive integer")
    zeros = _zeros(zero)
    allowed = ", ".join(r.value for r in RECOMPUTES)
    recs = []
    for r in recompute if recompute is not None else [r.value for r in RECOMPUTES]:
        try:
            recs.append(Recompute(str(r).strip().lower()))
        except ValueError:
            raise ConfigError(f"recompute={r!r} is unknown; allowed: {allowed}") from None
    if not recs:
        raise ConfigError(f"recompute must list at least one mode; allowed: {allowed}")
    sps = tuple(sorted(set(sp), reverse=True)) if sp is not None else (True, False)
    if not sps:
        raise ConfigError("sp must list at least one setting; allowed: 1, 0")
    return Limits(max_tp=max_tp, max_cp=max_cp, max_pp=max_pp, max_vp=max_vp, max_mbs=max_mbs, zero=zeros,
                  recompute=tuple(dict.fromkeys(recs)), sp=sps, hybrid=hybrid, orders=_orders(orders))


def _choices(name: str, value: Any, allowed: tuple[str, ...], what: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """The names of `allowed` that `value` lists (any case), in `allowed`'s order; `default` when None;
    ConfigError naming `name` for an empty list, a bare string or a name not allowed."""
    if value is None:
        return default
    chosen = set() if isinstance(value, str | bytes) else {str(v).strip().lower() for v in value}
    if not chosen or chosen - set(allowed):
        raise ConfigError(f"{name}={_shown(value)} must list {what}; allowed: {', '.join(allowed)}")
    return tuple(v for v in allowed if v in chosen)


def _switches(name: str, value: Any, what: str, default: tuple[bool, ...]) -> tuple[bool, ...]:
    """The on/off settings (0, 1) that `value` lists, off first; `default` when None."""
    if value is None:
        return default
    if isinstance(value, str | bytes) or not value or any(o not in (0, 1) for o in value):
        raise ConfigError(f"{name}={_shown(value)} must list {what}; allowed: 0, 1")
    return tuple(sorted({bool(o) for o in value}))


def _shown(value: Any) -> str:
    return repr(value if isinstance(value, str | bytes) else list(value))


def _expert_limits(max_ep: int | None, max_etp: int | None, ep_overlap: list[bool] | None) -> dict[str, Any]:
    """The expert filters: largest ep and etp, and the all-to-all overlap settings to try (default both)."""
    for name, value in (("max_ep", max_ep), ("max_etp", max_etp)):
        if value is not None and value < 1:
            raise ConfigError(f"{name}={value} must be a positive integer")
    overlaps = _switches("ep_overlap", ep_overlap, "all-to-all overlap settings", (False, True))
    return {"max_ep": max_ep, "max_etp": max_etp, "ep_overlap": overlaps}


def _fp8_params_zeros(ctx: Context, zero: list[int] | None) -> list[int]:
    """The ZeRO stages a search with fp8_params tries: those given, or 0-2 (fp8 primary weights are modelled
    with the distributed optimizer's gather, not ZeRO-3's sharded weights); refused outside fp8 training of a
    transformer."""
    if ctx.workload.tables:
        raise ConfigError(f"fp8_params applies to transformer searches; {ctx.spec.name} has embedding tables; "
                          "allowed: omit it")
    if ctx.dtype is not DType.FP8:
        raise ConfigError(f"fp8_params keeps the GEMM weights in fp8 and needs dtype=fp8; got dtype={ctx.dtype}; "
                          "allowed: --dtype fp8, or omit fp8_params")
    if zero is not None and 3 in zero:
        raise ConfigError(f"zero={list(zero)} with fp8_params: fp8 primary weights are modelled with the "
                          "distributed optimizer's fp8 gather (zero <= 2), not ZeRO-3; allowed: zero 0, 1, 2")
    return list(zero) if zero is not None else [0, 1, 2]


def _zeros(zero: list[int] | None) -> tuple[int, ...]:
    zeros = tuple(sorted(set(zero))) if zero is not None else (0, 1, 2, 3)
    if not zeros or any(z not in (0, 1, 2, 3) for z in zeros):
        raise ConfigError(f"zero={list(zero or [])} must list ZeRO stages; allowed: 0, 1, 2, 3")
    return zeros


def _orders(orders: list[str] | str | None) -> tuple[str, ...]:
    """Placement orders: None = the default; "all" = every placement of tp, cp, dp, pp."""
    from madmax.config.strategy import parse_strategy

    if orders is None:
        return (DEFAULT_ORDER,)
    items = [orders] if isinstance(orders, str) else list(orders)
    if items == ["all"]:
        return all_orders()
    out = []
    for item in items:
        order = parse_strategy({"order": item}).order  # StrategyError names what is allowed
        if order not in out:
            out.append(order)
    if not out:
        raise ConfigError("orders must name at least one placement, e.g. tp-cp-ep-dp-pp, or 'all'")
    return tuple(out)


def search(model: Any, system: Any, num_gpus: int | None = None, task: Any = "pretrain",
           global_batch: int | None = None, seq_len: int | None = None, dtype: str | None = None, **options: Any):
    """Every valid strategy of `model` on `system` for `task`, as a pandas DataFrame, best first.

    Same model/system/task arguments as `madmax.simulate` (the global batch is required). Options:
    objective ('throughput' default, 'time', 'cost', 'energy'; see `search.objective` for the power
    model; price, USD per GPU-hour, and power, W per GPU, replace the system's for them), tokens (to train;
    default one iteration; with time, cost or energy the simulated strategies' values are the expected wall
    clock's with failures, checkpoints, restarts and stragglers under `reliability`, docs/goodput.md), top
    (strategies reported, default 10), exact
    (how many of the best by the step replay are simulated, default max(20, 2*top)), refine (how many
    of the best by the closed form are replayed step by step, default 2000), filters max_tp, max_pp,
    max_cp, max_vp, max_mbs, zero=[...], recompute=[...], sp=[...], hybrid (enumerate hybrid sharding
    groups), orders ([...] or 'all'), workers (processes for the simulations), calibration, and the
    fine-tuning fields of `simulate` (finetune, lora_rank, frozen_layers, lora_targets). A
    mixture-of-experts model is also searched over ep, etp and ep_overlap (filters max_ep, max_etp,
    ep_overlap=[...]; default both settings), with the routing of `simulate` (expert_load,
    capacity_factor). With dtype fp8, fp8_params=True keeps every candidate's GEMM weights in fp8 only
    (strategy key fp8_params: no bf16 copy, fp8 parameter gathers; ZeRO 0-2). memory_margin keeps each GPU's memory
    partly free: a share (0.05, "5%") or bytes ("4 GiB"); default 5%, 0 uses it all. tp_overlap=[0, 1]: each
    simulated candidate with tp > 1 and sequence parallelism is also simulated with tp_overlap=1 (the TP collectives
    pipelined into the GEMMs, Megatron's --tp-comm-overlap), and keeps it when faster; [1] keeps it always; default
    [0], not tried (each such candidate would be simulated twice). dispatcher=["alltoall", "deepep"] does the same
    for MoE candidates with ep > 1 and the DeepEP dispatcher (default ["alltoall"]). stack names the training stack
    (`simulate`'s; default megatron-core): the candidates are screened and replayed with Megatron-Core's schedule
    under the stack's compute profile and attention kernel, and the simulated ones, which the ranking reports, run
    under the stack itself (raise exact to simulate more of them).

    One row per evaluated candidate (it passes the divisibility rules and fits in memory). Columns: the
    strategy and its degrees (`shard` 0: the whole data-parallel group; an MoE model adds `ep`, `etp`
    and `ep_overlap`); `estimated_iteration_time_s`
    (the step replay where run, else the closed form); `simulated`; `iteration_time_s`,
    `tokens_per_s_per_gpu`, `mfu`, `peak_memory_bytes`, `objective` (simulated where `simulated`, else
    estimated); `exposed_communication_s` (simulated rows only).
    Simulated rows come first, ranked by the objective. `df.attrs` holds `enumerated`, `rejected` (per
    rule, including `memory`), `evaluated`, `objective` and `timings_s`.

    A model with embedding tables (a recommendation model) is searched over its sharding plan jointly
    with ZeRO (`search.tables`): emb=[...] (shardings to try, default tw, rw, cw, twrw, dp, hybrid),
    emb_balance=[...] (what placing tables balances, for tw, cw and hybrid: size, lookup, count; default size
    only, as each other one re-plans those plans), zero and
    hybrid (one-node shard groups) filter it; every candidate is simulated, so exact and refine do not
    apply, and max_vp, max_mbs, recompute, sp and orders are errors. Its frame adds the columns `emb`,
    `emb_balance` and `emb_group` (0: all ranks); its tokens are samples (sequence length 1).

    task="inference" searches serving. With request_rate (requests/s) and slo ("p99_ttft=1,p99_tpot=50ms" or
    {"p99_ttft": 1.0, ...}, seconds) it is a capacity search (`search.capacity`): the deployments that serve
    the rate within the SLOs, one row per replica layout and format (simulated rows first, best first;
    columns system, replica, replicas, num_gpus, rate_per_replica, meets, missed, one `<slo>_s` column
    each, usd_per_hour, usd_per_million_output_tokens, power_w); options prompt_len, output_len, stack, dtypes,
    kv_dtypes, max_tp, max_pp, objective (throughput: fewest GPUs, cost, energy), price, power, top, exact,
    num_requests, seed, scenario (an MLPerf scenario's limits instead of slo); `system` may be a list and
    num_gpus caps the GPUs; arrivals (a CSV of arrival_s, prompt_len, output_len) replaces request_rate and the
    lengths. `df.attrs["confirm"]` is the simulate command of the best. Without request_rate or arrivals:
    the serving layouts of num_gpus GPUs (`search.serving`), by
    output tokens/s per GPU within max_ttft and max_tpot.
    """
    if str(getattr(task, "value", task)).strip().lower() == "inference":
        return _serving_frame(model, system, num_gpus, global_batch, seq_len, dtype, options)
    return to_frame(find(model, system, num_gpus, task, global_batch, seq_len, dtype, **options))


def _serving_frame(model: Any, system: Any, num_gpus: int | None, global_batch: int | None, seq_len: int | None,
                   dtype: str | None, options: dict[str, Any]):
    """`search(task="inference")`: with request_rate (and slo) the capacity search's deployments
    (`search.capacity`, num_gpus the most GPUs), else the serving layouts of num_gpus (`search.serving`)."""
    import pandas as pd

    given = [n for n, v in (("global_batch", global_batch), ("seq_len", seq_len)) if v is not None]
    if dtype is not None:
        given.append("dtype (give dtypes=[...], the weight formats to try)")
    if given:
        raise ConfigError(f"{given[0]} applies to training searches; allowed with task=inference: prompt_len, "
                          "output_len, request_rate, slo, dtypes, kv_dtypes and the serving search's options")
    if any(options.get(k) is not None for k in ("request_rate", "arrivals", "slo", "scenario")):
        from madmax.search.capacity import find_capacity, rows

        if options.get("request_rate") is None and options.get("arrivals") is None:
            raise ConfigError("a capacity search (slo, scenario) needs the load: request_rate (requests/s) or "
                              "arrivals (a CSV); allowed: request_rate or arrivals with slo")
        found = find_capacity(model, system, max_gpus=num_gpus, **options)
        frame = pd.DataFrame(rows(found))
        frame.attrs.update({"request_rate": found.request_rate, "arrivals": found.arrivals, "slo": dict(found.slos),
                            "objective": found.objective, "enumerated": found.enumerated,
                            "rejected": dict(found.rejected), "timings_s": dict(found.timings_s)})
        best = found.meeting()
        frame.attrs["confirm"] = found.confirm_command(best[0]) if best else None
        return frame
    from madmax.search.serving import find_serving

    found = find_serving(model, system, num_gpus, **options)
    simulated = {id(c) for c, _ in found.exact}
    records = [_layout_record(c, r) for c, r in found.exact]
    records += [_layout_record(c, None) for c in found.candidates if id(c) not in simulated]
    frame = pd.DataFrame(records)
    frame.attrs.update({"mode": found.mode, "limits": dict(found.limits), "enumerated": found.enumerated,
                        "rejected": dict(found.rejected), "timings_s": dict(found.timings_s)})
    return frame


def _layout_record(c: Any, r: Any) -> dict[str, Any]:
    """A serving layout's row: its simulated result `r`'s numbers, or without one its estimate's."""
    known = r if r is not None else c
    return {"strategy": c.strategy, "tp": c.tp, "pp": c.pp, "dp": c.dp, "ep": c.ep, "etp": c.etp, "dtype": c.dtype,
            "kv_dtype": c.kv_dtype, "batch": c.batch, "simulated": r is not None,
            "fits": True if r is None else r.fits, "ttft_s": known.ttft_s, "tpot_s": known.tpot_s,
            "output_tokens_per_s_per_gpu": known.output_tokens_per_s_per_gpu,
            "peak_memory_bytes": None if r is None else r.peak_memory_bytes}


def to_frame(outcome: Outcome):
    """The outcome as a DataFrame (see `search`)."""
    import pandas as pd

    from madmax.search.space import RECOMPUTES as RECS
    from madmax.search.space import strategy_strings

    order = outcome.ranked
    cols = {k: v[order] for k, v in outcome.columns.items()}
    t = outcome.best_time_s()[order]
    est = np.where(np.isnan(outcome.refined_s), outcome.estimate_s, outcome.refined_s)[order]
    sim = np.isin(order, np.fromiter(outcome.exact, dtype=np.int64, count=len(outcome.exact)))
    peak = outcome.peak_memory_bytes[order].copy()
    exposed = np.full(len(order), np.nan)
    mfu = outcome.model_flops[order] / t / (outcome.ctx.system.gpu.flops_per_s[outcome.ctx.dtype]
                                            * outcome.ctx.num_gpus)
    objective = np.asarray(outcome.scorer.value(t), dtype=float).copy()
    for pos in np.flatnonzero(sim):
        r = outcome.exact[int(order[pos])]
        peak[pos], exposed[pos], mfu[pos] = r.peak_memory_bytes, r.breakdown["exposed_communication_s"], r.mfu
        objective[pos] = outcome.objective_value(int(order[pos]))
    strategies = strategy_strings(cols, outcome.space.orders, outcome.ctx.fp8_params)
    overlapped, deepep = np.zeros(len(order), dtype=bool), np.zeros(len(order), dtype=np.int8)
    for pos in np.flatnonzero(sim):
        suffix = outcome.variants.get(int(order[pos]), "")
        strategies[pos] += suffix
        overlapped[pos], deepep[pos] = TP_OVERLAP in suffix, DEEPEP in suffix
    frame = pd.DataFrame({
        "strategy": strategies, "tp": cols["tp"], "pp": cols["pp"], "dp": cols["dp"], "cp": cols["cp"],
        "vp": cols["vp"], "mbs": cols["mbs"], "microbatches": cols["m"], "zero": cols["zero"],
        "shard": cols["shard"], "recompute": pd.Categorical.from_codes(cols["rec"], [r.value for r in RECS]),
        "sp": cols["sp"].astype(bool), "tp_overlap": overlapped,
        "order": pd.Categorical.from_codes(cols["order"], list(outcome.space.orders)),
        "simulated": sim, "estimated_iteration_time_s": est, "iteration_time_s": t,
        "tokens_per_s_per_gpu": outcome.ctx.tokens / t / outcome.ctx.num_gpus, "mfu": mfu,
        "peak_memory_bytes": peak, "exposed_communication_s": exposed,
        "objective": objective,
    })
    if outcome.ctx.has_experts:  # a mixture-of-experts model: its expert degrees after cp
        at = frame.columns.get_loc("cp") + 1
        for offset, (name, values) in enumerate((("ep", cols["ep"]), ("etp", cols["etp"]),
                                                 ("ep_overlap", cols["epo"].astype(bool)),
                                                 ("dispatcher", pd.Categorical.from_codes(deepep, DISPATCHERS)))):
            frame.insert(at + offset, name, values)
    if "emb" in cols:  # a model with tables: its sharding plan (emb_group 0: all ranks, as shard 0)
        frame.insert(frame.columns.get_loc("order") + 1, "emb",
                     pd.Categorical.from_codes(cols["emb"], list(EMB_SHARDINGS)))
        frame.insert(frame.columns.get_loc("emb") + 1, "emb_balance",
                     pd.Categorical.from_codes(cols["emb_bal"], list(EMB_BALANCES)))
        frame.insert(frame.columns.get_loc("emb_balance") + 1, "emb_group", cols["emb_group"])
        if "emb_offload" in cols:
            frame.insert(frame.columns.get_loc("emb_group") + 1, "emb_offload", cols["emb_offload"].astype(bool))
    frame.attrs.update({"enumerated": outcome.enumerated, "rejected": dict(outcome.rejected),
                        "evaluated": outcome.evaluated, "objective": outcome.scorer.objective.value,
                        "objective_unit": outcome.scorer.unit, "timings_s": dict(outcome.timings_s)})
    return frame
