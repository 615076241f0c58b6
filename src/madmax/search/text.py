"""Terminal output of a search (display units only here): the pruning counts and the top strategies."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from madmax.config.training_stack import default_training_stack
from madmax.config.units import GIB
from madmax.search.core import Outcome
from madmax.search.objective import Scorer
from madmax.terminal import make_console


def _objective(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value / 3600:,.2f} h" if value >= 3600 else f"{value:,.3f} s"
    if unit == "J":
        return f"{value / 3.6e9:,.3f} MWh" if value >= 3.6e9 else f"{value / 3.6e6:,.3f} kWh"
    if unit == "USD":
        return f"${value:,.2f}"
    return f"{value:,.0f}"


def _objective_header(score: Scorer) -> str:
    """The objective's column: what it measures, its unit where the cells carry none, and over how many
    tokens ('cost USD per iteration', 'time for 1e+12 tokens')."""
    scope = ("per iteration" if score.tokens == score.tokens_per_iteration
             else f"for {score.tokens:,.4g} tokens")
    unit = " USD" if score.unit == "USD" else ""
    return f"{score.objective.value}{unit} {scope}"


def report(outcome: Outcome, top: int, wall_s: float) -> dict[str, Any]:
    """Counts and rates of a search, for the text and JSON outputs."""
    return {"enumerated": outcome.enumerated, "rejected": dict(outcome.rejected), "valid": outcome.valid,
            "evaluated": outcome.evaluated, "replayed": int((outcome.refined_s == outcome.refined_s).sum()),
            "simulated": len(outcome.exact), "wall_s": wall_s,
            "strategies_per_s": outcome.valid / wall_s if wall_s > 0 else float("inf"), "top": top,
            "memory_limit_bytes": outcome.ctx.capacity_bytes, "memory_margin_bytes": outcome.ctx.memory_margin_bytes,
            "stack": outcome.ctx.stack}


def _counts(rows: list[tuple[str, str]]) -> Table:
    """The pruning counts of a search, one row each."""
    counts = Table(title="Candidates", title_justify="left", show_header=False)
    counts.add_column(style="bold")
    counts.add_column(justify="right")
    for key, value in rows:
        counts.add_row(key, value)
    return counts


def throughput_per_gpu(sample_name: str, num_gpus: int) -> tuple[str, Any]:
    """The throughput column of a model whose batch elements are `sample_name`s: tokens per second per GPU
    for sequences, else images or samples per second per GPU (a ViT's patch tokens are not what it serves);
    its header and a result -> value function."""
    if sample_name == "sequence":
        return "tok/s/GPU", lambda r: r.tokens_per_s_per_gpu
    short = {"image": "img"}.get(sample_name, sample_name + "s")
    return f"{short}/s/GPU", lambda r: r.samples_per_s / num_gpus


def memory_line(limit_bytes: float, margin_bytes: float) -> str:
    """What memory the search's plans were held to."""
    if not margin_bytes:
        return f"memory: plans within the {limit_bytes / GIB:,.1f} GiB a GPU can use (no margin kept free)"
    return (f"memory: plans within {limit_bytes / GIB:,.1f} of the {(limit_bytes + margin_bytes) / GIB:,.1f} GiB a GPU "
            f"can use ({margin_bytes / GIB:,.1f} GiB kept free; --memory-margin 0 uses it all)")


def stack_line(stack: str, every_candidate: bool) -> str:
    """Under which training stack the search's strategies were costed."""
    if every_candidate:  # a table search simulates each candidate
        return f"stack {stack}: every candidate simulated under it"
    return (f"stack {stack}: candidates screened with {default_training_stack()}'s schedule under {stack}'s kernel "
            f"profile; the simulated ones, ranked below, run under {stack} itself")


def print_search(outcome: Outcome, top: int, wall_s: float, console: Console | None = None) -> None:
    """The pruning counts, then the top strategies with time, throughput, MFU, memory and exposed comm."""
    console = console or make_console()
    ctx, score = outcome.ctx, outcome.scorer
    # A model with tables has no sequence: a token is a sample (seq_len 1).
    batch = f"{ctx.global_batch} samples" if ctx.has_tables else f"{ctx.global_batch} x {ctx.seq_len}"
    console.print(f"[bold]{ctx.spec.name}[/bold] on {ctx.num_gpus} x {ctx.system.name} ({ctx.task.kind.value}, "
                  f"{ctx.dtype.value}), global batch {batch}; objective {score.objective.value}", soft_wrap=True)
    info = report(outcome, top, wall_s)
    console.print(f"[dim]{memory_line(ctx.capacity_bytes, ctx.memory_margin_bytes)}[/dim]", soft_wrap=True)
    if ctx.stack != default_training_stack():
        console.print(f"[dim]{stack_line(ctx.stack, ctx.has_tables)}[/dim]", soft_wrap=True)
    # A table search simulates every candidate: it has no replay step.
    replayed = [] if ctx.has_tables else [("replayed step by step", f"{info['replayed']:,}")]
    console.print(_counts([("enumerated", f"{info['enumerated']:,}"),
                           *((f"  rejected: {rule}", f"{n:,}") for rule, n in info["rejected"].items()),
                           ("evaluated (fit in memory)", f"{info['evaluated']:,}"), *replayed,
                           ("simulated", f"{info['simulated']:,}"),
                           ("wall time", f"{wall_s:,.2f} s ({info['strategies_per_s']:,.0f} strategies/s)")]))
    best = outcome.top(top)
    if not best:
        console.print("[red]no strategy fits in memory[/red]")
        return
    table = Table(title=f"Top {len(best)} by {score.objective.value}", title_justify="left")
    rate, per_gpu = throughput_per_gpu(ctx.spec.sample_name, ctx.num_gpus)
    columns = ["#", "strategy", "iter ms", rate, "MFU", "GiB", "exposed ms"]
    if score.objective.value != "throughput":
        columns.append(_objective_header(score))
    for name in columns:
        table.add_column(name, justify="left" if name == "strategy" else "right", overflow="fold")
    fixed = TABLE_FIXED if ctx.has_tables else set()
    for rank, i in enumerate(best, 1):
        r = outcome.exact[i]
        row = [str(rank), compact(outcome.strategy(i), fixed), f"{r.iteration_time_s * 1e3:,.1f}",
               f"{per_gpu(r):,.0f}", f"{r.mfu:.1%}", f"{r.peak_memory_bytes / GIB:,.1f}",
               f"{r.breakdown['exposed_communication_s'] * 1e3:,.1f}"]
        if len(columns) > len(row):
            row.append(_objective(outcome.objective_value(i), score.unit))
        table.add_row(*row)
    console.print(table)
    block = outcome.exact[best[0]].time_to_train
    if block is not None:  # a time, cost or energy objective over a token budget: its column is the last
        console.print(f"[dim]{columns[-1]}: over the expected wall clock with failures, checkpoints, restarts and "
                      f"stragglers (reliability {block['profile']}, goodput {block['goodput']:.1%} for #1; "
                      "docs/goodput.md)[/dim]", soft_wrap=True)


def print_serving_search(search, top: int, wall_s: float, console: Console | None = None) -> None:
    """Counts of a serving search and its best layouts, each simulated."""
    console = console or make_console()
    limits = ", ".join(f"{k.removesuffix('_s').replace('max_', 'max ')} {v * 1e3:,.0f} ms"
                       for k, v in search.limits.items() if v is not None)
    console.print(f"[bold]{search.model}[/bold] on {search.num_gpus} x {search.system} (inference, {search.mode}, "
                  f"stack {search.stack}), {search.prompt_len} in + {search.output_len} out tokens"
                  + (f"; {limits}" if limits else ""), soft_wrap=True)
    console.print(_counts([("layouts x formats", f"{search.enumerated:,}"),
                           *((f"  rejected: {rule}", f"{n:,}") for rule, n in search.rejected.items()),
                           ("layouts x formats x batches within the limits", f"{len(search.candidates):,}"),
                           ("simulated", f"{len(search.exact):,}"), ("wall time", f"{wall_s:,.2f} s")]))
    best = search.top(top)
    if not best:
        console.print("[red]no layout fits in memory within the limits[/red]")
        return
    table = Table(title=f"Top {len(best)} by output tokens/s per GPU", title_justify="left")
    for name in ("strategy", "weights/kv", "batch", "TTFT ms", "TPOT ms", "tok/s/GPU", "GiB"):
        table.add_column(name, justify="left" if name in ("strategy", "weights/kv") else "right", no_wrap=True)
    for c, r in best:
        table.add_row(c.strategy, f"{c.dtype}/{c.kv_dtype}", str(c.batch), f"{r.ttft_s * 1e3:,.0f}",
                      f"{r.tpot_s * 1e3:,.1f}", f"{r.output_tokens_per_s_per_gpu:,.0f}",
                      f"{r.peak_memory_bytes / GIB:,.1f}")
    console.print(table)


def print_capacity(found, top: int, wall_s: float, console: Console | None = None) -> None:
    """A capacity search: its inputs and counts, the best deployments that meet the SLOs (each simulated, the
    best confirmed whole), or the closest units and the SLO each misses."""
    from madmax.search.capacity import closest
    from madmax.serve.slo import measured

    console = console or make_console()
    slos = ", ".join(f"{k} {_latency(v)}" for k, v in found.slos.items())
    cap = f", at most {found.max_gpus:,} GPUs" if found.max_gpus else ""
    load = (f"{found.request_rate:g} requests/s, stack {found.stack}), {found.prompt_len} in + {found.output_len} "
            "out tokens" if found.arrivals is None else
            f"the {len(found.trace[0]):,} requests of {found.arrivals}: {found.request_rate:.3g} requests/s, stack "
            f"{found.stack}), {found.prompt_len} in + {found.output_len} out tokens on average")
    console.print(f"[bold]{found.model}[/bold] on {', '.join(found.systems)} (inference, {load}; SLOs {slos}{cap}",
                  soft_wrap=True)
    console.print(_counts([("replica layouts x formats", f"{found.enumerated:,}"),
                           *((f"  rejected: {rule}", f"{n:,}") for rule, n in found.rejected.items()),
                           ("screened (closed form)", f"{len(found.screened):,}"),
                           ("simulated (rate mode)", f"{len(found.plans):,}"),
                           ("simulations", f"{sum(p.simulations for p in found.plans):,}"),
                           ("wall time", f"{wall_s:,.2f} s")]))
    best = found.meeting()[:top]
    if not best:
        console.print("[red]no deployment in the space meets the SLOs[/red]; the closest:")
        near = Table(show_header=True)
        for name in ("system", "replica", "weights/kv", "misses"):
            near.add_column(name, no_wrap=name != "misses")
        for unit, misses in closest(found, top):
            near.add_row(unit.system.name, unit.label, f"{unit.dtype}/{unit.kv_dtype}", "; ".join(misses))
        console.print(near)
        return
    by = {"throughput": "GPUs", "cost": "USD per hour", "energy": "power"}[found.objective]
    table = Table(title=f"Top {len(best)} deployments by {by}", title_justify="left")
    heads = ["system", "replica", "w/kv", "replicas", "GPUs", "req/s each",
             *(f"{k.replace('_', ' ')} ms" for k in found.slos), "$/h", "$/1M out"]
    for name in heads:
        table.add_column(name, justify="left" if name in ("system", "replica", "w/kv") else "right",
                         no_wrap=name != "system")
    for plan in best:
        u, result = plan.unit, plan.confirmed or plan.result
        per_hour = u.usd_per_hour(plan.num_gpus)
        per_million = found.usd_per_million_output_tokens(per_hour)
        served = f"{plan.rate_per_replica:,.2f}" + (f" (<{plan.rate_missed:,.2f})" if plan.rate_missed else "")
        table.add_row(u.system.name, u.label, f"{u.dtype}/{u.kv_dtype}", f"{plan.replicas:,}", f"{plan.num_gpus:,}",
                      served, *(f"{(measured(result, k) or 0) * 1e3:,.1f}" for k in found.slos),
                      f"{per_hour:,.2f}" if per_hour is not None else "-",
                      f"{per_million:,.2f}" if per_million is not None else "-")
    console.print(table)
    first = best[0]
    console.print(f"w/kv: weight and KV-cache formats; req/s each: what each replica serves at the rate (after <: "
                  f"with one replica fewer, which misses an SLO). The first deployment simulated whole at "
                  f"{found.request_rate:.4g} requests/s over {found.whole_requests(first):,} requests "
                  f"({'meets' if first.confirmed is not None else 'not run'}); to run it again:", soft_wrap=True)
    console.print(found.confirm_command(first), soft_wrap=True, markup=False, highlight=False)
    result = first.confirmed or first.result
    for launch in result.launch if result is not None else []:
        console.print(f"Each replica's engine, {launch['tool']} {launch['version']} (flags: catalog launchers.yaml; "
                      "`simulate --commands` adds the notes):", soft_wrap=True)
        console.print(launch["command"], soft_wrap=True, markup=False, highlight=False)
        if launch["config"]:
            console.print(f"{launch['config_name']}:\n{launch['config'].rstrip()}", soft_wrap=True, markup=False,
                          highlight=False)


def _latency(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds < 1 else f"{seconds:,.3g} s"


DEFAULTS = {"cp=1", "ep=1", "vp=1"}
TABLE_FIXED = {"tp=1", "pp=1", "recompute=none", "sp=0"}  # the same in every candidate of a table search


def compact(strategy: str, fixed: frozenset[str] | set[str] = frozenset()) -> str:
    """The strategy without the keys at their default (cp=1, ep=1, vp=1) or in `fixed`, for narrow terminals."""
    return ",".join(p for p in strategy.split(",") if p not in DEFAULTS and p not in fixed)
