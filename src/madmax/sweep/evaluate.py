"""One point of a sweep -> one row: its inputs, the `simulate` keys flattened, and cost and energy to train.

Time, GPU-hours, cost and energy to train N tokens (or S samples = S x seq_len tokens) come from the
search's `Scorer` (madmax.search.objective), so sweeps and searches share one cost and power model:

    time_to_train_s = N T / (B s)           T: iteration time (s), B s: tokens per iteration
                      / goodput             with a `train` amount: the expected wall clock with failures,
                                            checkpoints, restarts and stragglers (madmax.results.goodput; its
                                            reliability profile and what-ifs), N T / (B s) in ideal_time_to_train_s
    gpu_hours       = G time_to_train_s / 3600
    cost_usd        = price_per_gpu_hour_usd x gpu_hours
    energy_j        = P time_to_train_s      P: node_power_w x nodes (else GPU TDP x G), constant at load

Without a `train` amount, N is the tokens of one iteration. A point whose input is bad (a strategy that
does not divide the cluster, ...) is a row with status 'error' and the sentence; a search that finds no
strategy that fits is status 'no_fit'. Any other exception is a bug: status 'failed', never stored.
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

from madmax.errors import MadmaxError
from madmax.sweep.spec import Point
from madmax.sweep.whatif import RESOURCES, apply_reliability_whatif, apply_whatif

# Column -> type of every row; breakdown columns (compute_<kind>_s, exposed_<kind>_s, overlapped_<kind>_s)
# are added per collective or kernel kind, as float64.
COLUMNS = {
    "key": "string", "index": "int64", "group_name": "string", "mode": "string", "model": "string",
    "system": "string", "provider": "string", "gpu": "string", "gpus_per_node": "int64", "num_gpus": "int64",
    "task": "string", "global_batch": "int64", "seq_len": "int64", "dtype": "string",
    "strategy_input": "string", "stack": "string", "whatif": "string", "whatif_resource": "string",
    "whatif_factor": "float64",
    **{f"scale_{r}": "float64" for r in RESOURCES}, "spares": "float64",
    "train_tokens": "float64", "train_samples": "float64", "price_per_gpu_hour_usd": "float64",
    "power_w": "float64", "hbm_bytes": "float64",
    "status": "string", "error": "string", "strategy": "string", "fits": "bool",
    "iteration_time_s": "float64", "samples_per_s": "float64", "tokens_per_s": "float64",
    "tokens_per_s_per_gpu": "float64", "mfu": "float64", "hfu": "float64", "peak_memory_bytes": "float64",
    "compute_s": "float64", "communication_s": "float64", "exposed_communication_s": "float64",
    "overlapped_communication_s": "float64", "pipeline_bubble_s": "float64",
    "time_to_train_s": "float64", "gpu_hours": "float64", "cost_usd": "float64", "energy_j": "float64",
    "ideal_time_to_train_s": "float64", "goodput": "float64", "interruptions": "float64", "reliability": "string",
    "checkpoint_interval_s": "float64",
    "search_evaluated": "int64", "search_top_json": "string", "breakdown_json": "string", "assumptions": "string",
}
BREAKDOWN_PREFIXES = ("compute_", "exposed_", "overlapped_")
_STRATEGY_DESCRIBED = {"tp", "pp", "dp", "cp", "ep", "vp", "mbs", "zero", "shard", "recompute", "sp"}
SECONDS_PER_HOUR = 3600

# The engine's caches register cost models in lists: not safe for threads, and pure-Python simulation
# gains nothing from them. Points in one process (a dask worker with threads) run one at a time.
_LOCK = threading.Lock()


def evaluate_chunk(points: list[Point]) -> list[dict[str, Any]]:
    """Rows of `points`, in order (the task a worker process or dask worker runs)."""
    return [evaluate_point(p) for p in points]


def evaluate_point(point: Point) -> dict[str, Any]:
    """The row of one point; never raises for bad input (status 'error') nor for a bug (status 'failed')."""
    row = _inputs(point)
    try:
        with _LOCK:
            row.update(_evaluate(point))
    except MadmaxError as exc:
        row.update(status="error", error=str(exc))
    except Exception as exc:  # a bug, not bad input: reported and retried on resume, never stored
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    return row


def _inputs(p: Point) -> dict[str, Any]:
    scales = dict(p.scales)
    strategy_input = (p.strategy or "") if p.mode == "simulate" else (
        "search" if not p.candidates else "best of: " + " | ".join(p.candidates))
    return {"key": p.key, "index": p.index, "group_name": p.group, "mode": p.mode, "model": p.model_name,
            "system": p.system_name, "num_gpus": p.num_gpus, "task": p.task, "global_batch": p.global_batch,
            "seq_len": p.seq_len, "dtype": p.dtype, "strategy_input": strategy_input,
            "stack": p.stack_name or _default_stack(), "whatif": p.whatif,
            "whatif_resource": p.whatif_resource, "whatif_factor": p.whatif_factor,
            **{f"scale_{r}": float(scales.get(r, 1)) for r in RESOURCES}, "spares": scales.get("spares", math.nan),
            "train_tokens": p.train_tokens, "train_samples": p.train_samples,
            "price_per_gpu_hour_usd": p.price}


def _default_stack() -> str:
    from madmax.config.training_stack import default_training_stack

    return default_training_stack()


def _evaluate(p: Point) -> dict[str, Any]:
    from madmax.api import simulate
    from madmax.config.loaders import load_model, load_system
    from madmax.search.objective import power_w

    system = apply_whatif(load_system(p.system, p.num_gpus), dict(p.scales))
    if p.price is not None or p.power is not None:
        system = system.with_costs(p.price, p.power)
    model = load_model(p.model)
    out: dict[str, Any] = {
        "provider": system.provider, "gpu": system.gpu.name, "gpus_per_node": system.gpus_per_node,
        "num_gpus": system.cluster_gpus, "price_per_gpu_hour_usd": system.price_per_gpu_hour_usd,
        "power_w": power_w(system), "hbm_bytes": system.gpu.hbm_bytes}
    kwargs = {"model": model, "system": system, "task": p.task, "global_batch": p.global_batch,
              "seq_len": p.seq_len, "dtype": p.dtype}
    if p.stack is not None:
        kwargs["stack"] = p.stack
    if p.mode == "simulate":
        result, strategy, ranking, evaluated = simulate(**kwargs, strategy=p.strategy), p.strategy, None, None
    elif p.candidates:
        result, strategy, ranking, evaluated = _best_of(kwargs, p.candidates, dict(p.search)["top"])
    else:
        result, strategy, ranking, evaluated = search_best(kwargs, p)
    out.update(search_evaluated=evaluated, search_top_json=None if ranking is None else json.dumps(ranking))
    if result is None:
        return {**out, "status": "no_fit", "fits": False}
    out.update(_result_columns(result), strategy=_full_strategy(result.strategy, strategy))
    if p.train_tokens is None and p.train_samples is None:  # one iteration: no run for failures to interrupt
        out.update(training_columns(system, result.global_batch * result.seq_len, result.iteration_time_s,
                                    None, None, result.seq_len))
    else:
        out.update(goodput_columns(result, system, p))
    return out


def goodput_columns(result: Any, system: Any, p: Point) -> dict[str, Any]:
    """Time, GPU-hours, cost and energy to train the point's amount with failures, checkpoints, restarts and
    stragglers (`madmax.results.goodput`, the point's reliability profile and reliability what-ifs), and the
    goodput terms beside them; the ideal time stays in ideal_time_to_train_s."""
    from madmax.config.reliability import load_reliability
    from madmax.results.goodput import time_to_train

    tokens = p.train_tokens if p.train_tokens is not None else p.train_samples * result.seq_len
    profile = apply_reliability_whatif(load_reliability(p.reliability), dict(p.scales))
    t = time_to_train(result, system, tokens, profile)
    return {"time_to_train_s": t["wall_s"], "gpu_hours": t["gpu_hours"],
            "cost_usd": math.nan if t["cost_usd"] is None else t["cost_usd"], "energy_j": t["energy_j"],
            "ideal_time_to_train_s": t["breakdown_s"]["ideal"], "goodput": t["goodput"],
            "interruptions": t["interruptions"], "reliability": profile.name,
            "checkpoint_interval_s": math.nan if t["checkpoint_interval_s"] is None else t["checkpoint_interval_s"]}


def search_best(kwargs: dict[str, Any], p: Point) -> tuple[Any, str | None, list[dict[str, Any]], int]:
    """The best strategy of a point by `madmax.search` (the hook where the search plugs in).

    Returns (simulate Result of the best fitting strategy or None, its strategy string, the top
    strategies as dicts, candidates evaluated). The search's own options come from the sweep's `search`.
    """
    from madmax.search.api import find

    opts = dict(p.search)
    top, exact = opts.pop("top"), opts.pop("exact")
    outcome = find(kwargs["model"], kwargs["system"], None, kwargs["task"], kwargs["global_batch"],
                   kwargs["seq_len"], kwargs["dtype"], tokens=p.train_tokens, top=top, exact=exact or top,
                   workers=1, stack=kwargs.get("stack"), **opts)
    ids = outcome.top(top)
    ranking = [{"strategy": outcome.strategy(i), **_summary(outcome.exact[i])} for i in ids]
    if not ids:
        return None, None, ranking, outcome.evaluated
    return outcome.exact[ids[0]], outcome.strategy(ids[0]), ranking, outcome.evaluated


def _best_of(kwargs: dict[str, Any], candidates: tuple[str, ...], top: int):
    """The fastest fitting candidate by `simulate` (at a fixed GPU count and batch every objective ranks
    by iteration time); MadmaxError of the first candidate when none is valid."""
    from madmax.api import simulate

    results, first_error = [], None
    for s in candidates:
        try:
            results.append((s, simulate(**kwargs, strategy=s)))
        except MadmaxError as exc:
            first_error = first_error or exc
    if not results:
        raise first_error  # type: ignore[misc]
    fitting = sorted((r.iteration_time_s, k) for k, (_, r) in enumerate(results) if r.fits)
    ranking = [{"strategy": _full_strategy(results[k][1].strategy, results[k][0]), **_summary(results[k][1])}
               for _, k in fitting[:top]]
    if not fitting:
        return None, None, ranking, len(results)
    s, best = results[fitting[0][1]]
    return best, s, ranking, len(results)


def _summary(r: Any) -> dict[str, Any]:
    return {"iteration_time_s": r.iteration_time_s, "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu, "mfu": r.mfu,
            "exposed_communication_s": r.breakdown["exposed_communication_s"],
            "peak_memory_bytes": r.peak_memory_bytes, "fits": r.fits}


def _full_strategy(described: str, given: str | None) -> str:
    """The resolved strategy plus the keys given that `Strategy.describe` leaves out (emb=..., order=...)."""
    from madmax.config.strategy import parse_strategy

    if not given:
        return described
    have = {part.split("=")[0] for part in described.split(",")}
    extra = {k: v for k, v in parse_strategy(given).model_dump(mode="json", exclude_defaults=True).items()
             if k not in _STRATEGY_DESCRIBED and k not in have}
    return ",".join([described, *(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in extra.items())])


def column_name(kind: str) -> str:
    """A breakdown kind ('tp.all_gather') as a SQL-friendly column fragment ('tp_all_gather')."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", kind).strip("_").lower()


def _result_columns(r: Any) -> dict[str, Any]:
    b = r.breakdown
    comm = b["communication_s"]
    out = {"status": "ok", "fits": bool(r.fits), "iteration_time_s": r.iteration_time_s,
           "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s,
           "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu, "mfu": r.mfu, "hfu": r.hfu,
           "peak_memory_bytes": float(r.peak_memory_bytes), "global_batch": r.global_batch, "seq_len": r.seq_len,
           "dtype": r.dtype, "compute_s": b["compute_s"]["total"],
           "communication_s": sum(c["total"] for c in comm.values()),
           "exposed_communication_s": b["exposed_communication_s"],
           "overlapped_communication_s": sum(c["overlapped"] for c in comm.values()),
           "pipeline_bubble_s": b["pipeline_bubble_s"], "breakdown_json": json.dumps(b),
           "assumptions": "; ".join(r.assumptions)}
    for kind, seconds in b["compute_s"].items():
        if kind != "total":
            out[f"compute_{column_name(kind)}_s"] = seconds
    for kind, c in comm.items():
        out[f"exposed_{column_name(kind)}_s"] = c["exposed"]
        out[f"overlapped_{column_name(kind)}_s"] = c["overlapped"]
    return out


def training_columns(system: Any, tokens_per_iteration: int, iteration_time_s: float, train_tokens: float | None,
                     train_samples: float | None, seq_len: int) -> dict[str, float]:
    """Time, GPU-hours, cost (NaN without a price) and energy to train the amount (see the module docstring)."""
    from madmax.search.objective import Objective, scorer

    tokens = train_tokens if train_tokens is not None else (
        train_samples * seq_len if train_samples is not None else None)
    time_s = scorer(Objective.TIME, system, tokens_per_iteration, tokens).value(iteration_time_s)
    cost = (scorer(Objective.COST, system, tokens_per_iteration, tokens).value(iteration_time_s)
            if system.price_per_gpu_hour_usd is not None else math.nan)
    return {"time_to_train_s": time_s, "gpu_hours": system.cluster_gpus * time_s / SECONDS_PER_HOUR,
            "cost_usd": cost, "energy_j": scorer(Objective.ENERGY, system, tokens_per_iteration, tokens)
            .value(iteration_time_s)}
