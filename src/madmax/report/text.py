"""Terminal output with rich: results, model inspection and catalog listings (display units only here)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from madmax.config.training_stack import default_training_stack
from madmax.config.units import GIB
from madmax.errors import MadmaxError
from madmax.parallel.memory import RESERVE_PARTS
from madmax.results import Result
from madmax.results.serving import ServingResult
from madmax.results.training import BUBBLE_NOTE_PREFIX
from madmax.terminal import make_console

EXPOSED_CAPTION = ("exposed: each kind's share of exposed communication (collectives in flight together split it "
                   "equally); overlapped: hidden behind compute or another collective")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def print_result(result: Result, console: Console | None = None) -> None:
    """Headline metrics, the compute/communication breakdown and memory of one simulation."""
    console = console or make_console()
    # The training stack is named when it is not the default (Megatron-Core), as a serving run names its engine.
    stack = f", stack {result.stack}" if result.stack and result.stack != default_training_stack() else ""
    console.print(f"[bold]{result.model}[/bold] on {result.num_gpus} x {result.system} "
                  f"({result.task}, {result.dtype}{stack})\nstrategy {result.strategy}", soft_wrap=True)
    if result.recompute_choice:
        console.print(result.recompute_choice, soft_wrap=True)
    head = Table(show_header=False)
    head.add_column(style="bold", no_wrap=True)
    head.add_column(justify="right", overflow="fold")
    # A sample of one token (a recommendation model's) is counted in samples; a forward-only step is a step.
    per_sample = result.seq_len == 1
    inference = result.task == "inference"
    # a ViT serves images: its rate is in images, not in patch tokens
    samples = "images" if result.sample_name == "image" else "samples"
    rows = [
        ("global batch", f"{result.global_batch}") if per_sample else
        ("global batch x seq", f"{result.global_batch} x {result.seq_len}"),
        ("step time" if inference else "iteration time", _ms(result.iteration_time_s)),
        (f"{samples}/s", f"{result.samples_per_s:,.2f}"),
        (f"{samples}/s per GPU", f"{result.samples_per_s / result.num_gpus:,.0f}")
        if per_sample or result.sample_name == "image" else
        ("tokens/s per GPU", f"{result.tokens_per_s_per_gpu:,.0f}"),
        ("MFU", f"{result.mfu:.1%}") if inference else ("MFU / HFU", f"{result.mfu:.1%} / {result.hfu:.1%}"),
        ("peak memory per GPU", f"{result.peak_memory_bytes / GIB:,.1f} GiB of "
                                f"{result.memory['capacity'] / GIB:,.0f} GiB"),
        ("fits", "yes" if result.fits else f"[red]NO[/red]: {result.fits_reason}"),
    ]
    if result.cost:
        rows.append(("cost", _cost_text(result.cost, "tokens")))
    band = result.error_band
    if band and band.get("p50_abs_pct") is not None:
        rows.append(("expected error", f"±{band['p50_abs_pct']:.0f}% typical, ±{band['p90_abs_pct']:.0f}% p90 "
                                       f"({band['rows']} validation rows: {band['basis']})"))
    for key, value in rows:
        head.add_row(key, value)
    console.print(head)
    if band and band.get("note"):
        console.print(f"[yellow]expected error: {band['note']}[/yellow]")
    b = result.breakdown
    table = Table(title=f"Breakdown of stage {b['stage']} (critical path)", title_justify="left",
                  caption=EXPOSED_CAPTION if b["communication_s"] else None, caption_justify="left")
    table.add_column("part")
    table.add_column("time", justify="right")
    table.add_column("exposed", justify="right")
    table.add_column("overlapped", justify="right")
    for kind, seconds in b["compute_s"].items():
        if kind != "total" and seconds:
            table.add_row(f"compute: {kind}", _ms(seconds), "", "")
    for kind, c in sorted(b["communication_s"].items()):
        table.add_row(f"comm: {kind}", _ms(c["total"]), _ms(c["exposed"]), _ms(c["overlapped"]))
    table.add_row("exposed communication", _ms(b["exposed_communication_s"]), "", "")
    if b.get("host_s", {}).get("total"):
        h = b["host_s"]
        table.add_row("host: call, sync, data, logging", _ms(h["total"]), _ms(h["exposed"]), _ms(h["overlapped"]))
    if b.get("overlap_slowdown_s"):
        table.add_row("overlap slowdown", _ms(b["overlap_slowdown_s"]), "", "")
    table.add_row("pipeline bubble", _ms(b["pipeline_bubble_s"]), "", "")
    console.print(table)
    mem = Table(title=f"Memory per GPU of stage {result.memory['stage']}", title_justify="left", show_header=False)
    for key in ("weights", "gradients", "optimizer", "embedding_tables", "activations", "reserved", *RESERVE_PARTS,
                "total", "capacity"):
        if key in result.memory:
            mem.add_row(key.replace("_", " "), f"{result.memory[key] / GIB:,.2f} GiB")
    console.print(mem)
    if result.time_to_train is not None:
        _print_time_to_train(result.time_to_train, result.num_gpus, console)
    for note in result.assumptions:
        if note != result.recompute_choice:  # printed under the strategy
            kind = "note" if note.startswith(BUBBLE_NOTE_PREFIX) else "assumed"
            console.print(f"[dim]{kind}: {note}[/dim]")
    for note in (result.time_to_train or {}).get("assumptions", []):
        console.print(f"[dim]assumed: {note}[/dim]")


SECONDS_PER_DAY = 86_400


def _duration(seconds: float) -> str:
    """Seconds as days, hours or minutes, whichever reads best."""
    if seconds >= 2 * SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:,.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds:,.1f} s"


def _tokens(n: float) -> str:
    """A token count with its prefix: 15.6 T, 300 B (billions), 2.5 M."""
    for scale, prefix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= scale:
            return f"{n / scale:,.4g} {prefix}"
    return f"{n:,.0f}"


def _print_time_to_train(t: dict[str, Any], num_gpus: int, console: Console) -> None:
    """The goodput model's time to train the token budget and where the wall clock goes."""
    table = Table(title=f"Time to train {_tokens(t['tokens'])} tokens (reliability {t['profile']})",
                  title_justify="left", show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(justify="right")
    table.add_column(justify="right", style="dim")
    wall = t["wall_s"]
    for key, label in (("ideal", "iterations at the simulated time"), ("stragglers", "stragglers (slowest GPU)"),
                       ("checkpoint_stalls", "checkpoint stalls"), ("lost_work", "work lost to failures"),
                       ("restarts", "restarts")):
        seconds = t["breakdown_s"][key]
        table.add_row(label, _duration(seconds), f"{seconds / wall:.1%}" if wall else "")
    table.add_row("wall clock", _duration(wall), "100%")
    table.add_row("goodput / effective training time", f"{t['goodput']:.1%} / {t['effective_training_time_ratio']:.1%}",
                  "")
    mtbf = t["mtbf_s"]
    table.add_row("expected interruptions", f"{t['interruptions']:,.0f}",
                  f"a failure every {_duration(mtbf)}" if mtbf is not None else "")
    interval = t["checkpoint_interval_s"]
    if interval is not None:
        how = "optimal" if t["checkpoint_interval_chosen"] else "given"
        table.add_row("checkpoint interval", _duration(interval),
                      f"{how}; {t['checkpoint_bytes'] / 1e12:,.3g} TB written in {_duration(t['checkpoint_write_s'])}")
    if t["interruptions"] > 0:
        table.add_row("restart", _duration(t["restart_each_s"]), "each, checkpoint load included")
    table.add_row("GPU-hours", f"{t['gpu_hours']:,.0f}", f"{t['ideal_gpu_hours']:,.0f} ideal on {num_gpus:,} GPUs")
    if t.get("cost_usd") is not None:
        table.add_row("cost", f"${t['cost_usd']:,.0f}", "")
    table.add_row("energy", f"{t['energy_j'] / 3.6e9:,.1f} MWh", "at load for the whole wall clock")
    console.print(table)


def print_rl(result: Any, console: Console | None = None) -> None:
    """One RL step (`madmax.results.rl.RLResult`): its time and throughput, each phase, each pool's use."""
    console = console or make_console()
    layout = result.layout + (", asynchronous" if result.asynchronous else "")
    console.print(f"[bold]{result.model}[/bold] on {result.num_gpus} x {result.system} (rl, {layout}; rollout "
                  f"{result.rollout_stack}, training {result.train_stack})\nrollout {result.rollout_strategy}\n"
                  f"training {result.train_strategy}", soft_wrap=True)
    head = Table(show_header=False)
    head.add_column(style="bold", no_wrap=True)
    head.add_column(justify="right", overflow="fold")
    for key, value in (
            ("step", f"{result.prompts:,} prompts x {result.samples} samples, {result.prompt_len:,} + "
                     f"{result.response_len:,.0f} tokens (longest response {result.longest_response:,})"),
            ("step time", _ms(result.step_time_s)),
            ("samples/s", f"{result.samples_per_s:,.2f}"),
            ("response tokens/s", f"{result.tokens_per_s:,.0f} ({result.tokens_per_s_per_gpu:,.0f} per GPU)"),
            ("fits", "yes" if result.fits else f"[red]NO[/red]: {result.fits_reason}")):
        head.add_row(key, value)
    console.print(head)
    phases = Table(title="Phases of the step", title_justify="left")
    for col in ("phase", "time", "share"):
        phases.add_column(col, justify="left" if col == "phase" else "right")
    total = sum(result.phases_s.values())
    for name, seconds in result.phases_s.items():
        phases.add_row(name.replace("_", " "), _ms(seconds), f"{seconds / total:.0%}" if total else "-")
        if name == "scoring":
            for part, t in result.passes_s.items():
                phases.add_row(f"  {part}", _ms(t), "")
    console.print(phases)
    pools = Table(title="Pools", title_justify="left")
    for col in ("pool", "GPUs", "busy"):
        pools.add_column(col, justify="left" if col == "pool" else "right")
    for name, pool in result.pools.items():
        pools.add_row(name, f"{pool['gpus']:,}", f"{pool['busy_fraction']:.0%}")
    console.print(pools)
    for note in result.assumptions:
        console.print(f"[dim]assumed: {note}[/dim]")


def print_rl_search(found: Any, top: int, wall_s: float, console: Console | None = None) -> None:
    """The RL layouts searched (`madmax.rl.search.RLSearch`): the best `top` by step time, each pool size's training
    strategy, and the candidates that could not run with their reasons."""
    console = console or make_console()
    total = len(found.ranked) + len(found.refused)
    console.print(f"[bold]{found.model}[/bold] on {found.num_gpus} x {found.system} (rl): {total} layouts, "
                  f"{len(found.ranked)} simulated, {len(found.refused)} refused; {found.setup.prompts:,} prompts x "
                  f"{found.setup.samples} samples a step; wall time {wall_s:.1f} s", soft_wrap=True)
    for gpus, strategy in sorted(found.train_strategies.items(), reverse=True):
        console.print(f"training on {gpus} GPUs: {strategy} (the training search's best)", soft_wrap=True)
    table = Table(title=f"Top {min(top, len(found.ranked))} by step time", title_justify="left",
                  caption="busy: the share of the step each pool works (rollout / training)", caption_justify="left")
    for col in ("#", "layout", "step s", "samples/s", "gen s", "score s", "train s", "sync s", "busy", "fits"):
        table.add_column(col, justify="left" if col == "layout" else "right", no_wrap=col == "layout")
    for rank, (c, r) in enumerate(found.ranked[:top], 1):
        p = r.phases_s
        busy = " / ".join(f"{pool['busy_fraction']:.0%}" for pool in r.pools.values())
        table.add_row(str(rank), c.describe(found.num_gpus), f"{r.step_time_s:,.1f}", f"{r.samples_per_s:,.1f}",
                      f"{p['generation']:,.1f}", f"{p['scoring']:,.1f}", f"{p['training']:,.1f}",
                      f"{p['weight_sync']:,.2f}", busy, "yes" if r.fits else "[red]NO[/red]")
    console.print(table)
    for c, reason in found.refused:
        console.print(f"[dim]refused: {c.describe(found.num_gpus)}: {reason}[/dim]", soft_wrap=True)


def print_serving(result: ServingResult, console: Console | None = None) -> None:
    """Headline serving metrics, the breakdown of a prefill and a decode step, and memory."""
    console = console or make_console()
    console.print(f"[bold]{result.model}[/bold] on {result.num_gpus} x {result.system} (inference, {result.mode}, "
                  f"{result.dtype}, kv {result.kv_dtype}, stack {result.stack})\nstrategy {result.strategy}",
                  soft_wrap=True)
    head = Table(show_header=False)
    head.add_column(style="bold", no_wrap=True)
    head.add_column(justify="right", overflow="fold")
    batch = f"{result.batch} per replica" if result.batch else "as the requests arrive"
    rows = [
        ("requests", f"{batch}, {result.prompt_len:,.0f} in + {result.output_len:,.0f} out tokens"),
        ("time to first token", _ms(result.ttft_s)),
        ("time per output token", _ms(result.tpot_s)),
        ("end-to-end latency", _ms(result.e2e_latency_s)),
        ("output tokens/s", f"{result.output_tokens_per_s:,.0f} ({result.output_tokens_per_s_per_gpu:,.0f} per GPU)"),
        ("requests/s", f"{result.requests_per_s:,.2f}"),
        ("prefill of the batch", _ms(result.prefill_time_s)),
        ("decode step of the batch", _ms(result.decode_step_time_s)),
        ("max batch by memory", f"{result.max_batch_by_memory:,}"),
        ("peak memory per GPU", f"{result.peak_memory_bytes / GIB:,.1f} GiB of "
                                f"{result.memory['capacity'] / GIB:,.0f} GiB"),
        ("fits", "yes" if result.fits else f"[red]NO[/red]: {result.fits_reason}"),
    ]
    if result.goodput:
        g = result.goodput
        rows.append(("goodput", f"{g['requests_per_s']:,.2f} requests/s ({g['fraction']:.0%} within the limits)"))
    if result.cost:
        rows.append(("cost", _cost_text(result.cost, "output_tokens")))
    if result.slo:
        rows += _slo_rows(result.slo)
    for key, value in rows:
        head.add_row(key, value)
    console.print(head)
    if result.latency:
        lat = Table(title="Latency percentiles", title_justify="left")
        for col in ("", "mean", "p50", "p90", "p99"):
            lat.add_column(col, justify="right" if col else "left")
        for name, values in result.latency.items():
            lat.add_row(name.removesuffix("_s"), *("-" if values[k] is None else _ms(values[k])
                                                   for k in ("mean", "p50", "p90", "p99")))
        console.print(lat)
    b = result.breakdown
    table = Table(title=f"One prefill step (up to the token budget) and one decode step of the batch, stage "
                        f"{b['stage']}", title_justify="left")
    for col in ("part", "prefill", "decode"):
        table.add_column(col, justify="right" if col != "part" else "left")
    kinds = dict.fromkeys([*b["prefill"]["compute_s"], *b["decode"]["compute_s"]])
    for kind in kinds:
        if kind != "total":
            table.add_row(f"compute: {kind}", *(_ms(b[s]["compute_s"].get(kind, 0.0)) for s in ("prefill", "decode")))
    comms = dict.fromkeys([*b["prefill"]["communication_s"], *b["decode"]["communication_s"]])
    for kind in comms:
        table.add_row(f"comm: {kind}", *(_ms(b[s]["communication_s"].get(kind, {}).get("total", 0.0))
                                        for s in ("prefill", "decode")))
    table.add_row("host per step", _ms(b["prefill"]["host_s"]), _ms(b["decode"]["host_s"]))
    console.print(table)
    mem = Table(title="Memory per GPU", title_justify="left", show_header=False)
    for key in ("weights", "kv_cache", "activations", "reserved", "total", "kv_pool"):
        mem.add_row(key.replace("_", " "), f"{result.memory[key] / GIB:,.2f} GiB")
    console.print(mem)
    for note in result.limits:
        console.print(f"[yellow]limited by: {note}[/yellow]")
    for note in result.assumptions:
        console.print(f"[dim]assumed: {note}[/dim]")


def print_launches(launches: list[dict[str, Any]], why: str | None = None, console: Console | None = None) -> None:
    """The command lines of `Result.launch` / `ServingResult.launch`: each launcher's command, its config file
    and what does not carry over; when there are none, why (`launch_note`)."""
    console = console or make_console()
    if not launches:
        console.print(f"[yellow]launch: {why or 'no launcher applies'}[/yellow]")
        return
    for launch in launches:
        part = {"prefill": " (prefill servers)", "decode": " (decode servers)", "router": " (router)"}.get(
            launch.get("role") or "", "")
        console.print(f"\n[bold]launch: {launch['tool']} {launch['version']}{part}[/bold]")
        console.print(launch["command"], soft_wrap=True, markup=False, highlight=False)
        if launch["config"]:
            console.print(f"[bold]{launch.get('config_name') or 'config file'}[/bold]")
            console.print(launch["config"].rstrip(), soft_wrap=True, markup=False, highlight=False)
        for note in launch["notes"]:
            console.print(f"[dim]note: {note}[/dim]")
        console.print(f"[dim]flags: {launch['source']}[/dim]")


def _slo_rows(slo: dict[str, Any]) -> list[tuple[str, str]]:
    """The SLOs held against (each measured value and its limit), and the highest rate when searched."""
    rows = []
    if "highest_rate" in slo:
        last = "" if slo["rate_missed"] else "at least "  # the search's last rate: none it tried missed
        rows.append(("highest rate within the SLOs", f"{last}{slo['highest_rate']:,.3g} requests/s "
                                                     f"({slo['num_requests']:,} requests, {slo['simulations']} "
                                                     "simulations)"))
        if slo["rate_missed"]:
            rows.append(("the lowest rate that misses", f"{slo['rate_missed']:,.3g} requests/s: "
                                                        f"{'; '.join(slo['missed_at_rate_missed'])}"))
    for key, limit in slo["limits"].items():
        value = slo["measured"][key]
        ok = value is not None and value <= limit
        shown = "-" if value is None else _ms(value)
        rows.append((f"slo {key}", f"{shown} <= {_ms(limit)}" if ok else f"[red]{shown} > {_ms(limit)}[/red]"))
    return rows


def print_inspect(info: dict[str, Any], console: Console | None = None) -> None:
    console = console or make_console()
    model = info["model"]
    table = Table(title=f"{model['name']}", show_header=False, title_justify="left")
    shape = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size", "is_gated_ffn",
             "activation", "vocab_size", "tied_embeddings", "max_seq_len")
    if model.get("family") == "dlrm":
        shape = ("num_dense_features", "bottom_mlp", "top_mlp", "interaction", "embedding_dtype")
        tables = model["tables"]
        table.add_row("tables", f"{sum(t['count'] for t in tables)} in {len(tables)} shapes")
    if model.get("family") == "vit":
        shape = ("image_size", "patch_size", "num_channels", "num_layers", "hidden_size", "num_heads",
                 "ffn_hidden_size", "num_classes", "class_token", "parallel_layers", "qk_norm")
    for key in shape:
        value = model.get(key)
        if model.get("mla") and key in ("num_kv_heads", "head_dim"):
            continue  # latent attention: its widths are the mla rows
        if value is None and key in ("num_kv_heads", "head_dim"):
            value = model["num_heads"] if key == "num_kv_heads" else model["hidden_size"] // model["num_heads"]
        table.add_row(key, str(value))
    for key, value in _moe_and_mla_rows(model):
        table.add_row(key, value)
    table.add_row("total params", f"{info['total_params'] / 1e9:,.3f} B")
    for comp, count in info["params_by_component"].items():
        table.add_row(f"  {comp}", f"{count / 1e9:,.3f} B")
    if info["active_params"] != info["total_params"]:
        table.add_row("active params/token", f"{info['active_params'] / 1e9:,.3f} B")
    unit = "sample" if model.get("family") == "dlrm" else f"token (s={info['seq_len']})"
    table.add_row(f"forward FLOPs/{unit}", f"{info['forward_flops_per_token'] / 1e9:,.4f} GFLOP")
    table.add_row("weights (bf16)", f"{info['weights_bytes']['bf16'] / GIB:,.1f} GiB")
    console.print(table)


def _moe_and_mla_rows(model: dict[str, Any]) -> list[tuple[str, str]]:
    """The shape of the experts (count, top-k, width, shared experts, leading dense layers, interleave) and
    the latent-attention widths, for the models that have them."""
    rows = []
    if moe := model.get("moe"):
        keys = ["num_experts", "top_k", "expert_ffn_hidden_size", "shared_experts", "first_dense_layers"]
        keys += [k for k in ("shared_expert_ffn_hidden_size", "layer_freq") if moe[k] not in (None, 1)]
        rows += [(f"moe.{key}", str(moe[key])) for key in keys]
    if mla := model.get("mla"):
        rows += [(f"mla.{key}", str(value)) for key, value in mla.items()]
    return rows


def print_catalog_list(kind: str, console: Console | None = None) -> None:
    """The catalog entries of `kind` with their headline numbers: a GPU's memory, dense peak and memory
    bandwidth; a system's GPU, node and network bandwidths per GPU; a model's parameters."""
    from madmax.config.loaders import catalog_entries

    console = console or make_console()
    if kind == "stacks":
        _print_stack_list(console)
        return
    table = Table(title=f"catalog {kind}", title_justify="left")
    columns, rows = _CATALOG_COLUMNS[kind], _CATALOG_ROWS[kind]
    table.add_column("name", no_wrap=True)
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("aliases")
    for entry in catalog_entries(kind).values():
        try:
            cells = rows(entry["name"])
        except MadmaxError:  # an entry that does not load lists its name alone (`catalog show` says why)
            cells = [""] * len(columns)
        table.add_row(entry["name"], *cells, ", ".join(entry.get("aliases", [])))
    console.print(table)


def _cost_text(cost: dict, kind: str) -> str:
    """'$0.32 per million tokens at $12.29/GPU-h; 0.12 J per token at 10.2 kW' (either part when known)."""
    parts = []
    if cost.get(f"usd_per_million_{kind}") is not None:
        parts.append(f"${cost[f'usd_per_million_{kind}']:,.3g} per million {kind.replace('_', ' ')} at "
                     f"${cost['price_per_gpu_hour_usd']:,.2f}/GPU-h")
    per = cost.get(f"joules_per_{kind[:-1]}")
    if per is not None:
        parts.append(f"{per:,.3g} J per {kind[:-1].replace('_', ' ')} at {cost['power_w'] / 1e3:,.3g} kW "
                     f"({cost['power_basis']})")
    return "; ".join(parts)


def _print_stack_list(console: Console) -> None:
    """The training and serving stacks `--stack NAME` (API `stack=`) takes, each with what it describes."""
    from madmax.config.stack import default_stack, load_stack, stack_names
    from madmax.config.training_stack import default_training_stack, load_training_stack, training_stack_names

    table = Table(title="catalog stacks (--stack NAME)", title_justify="left")
    for column in ("name", "task", "describes"):
        table.add_column(column, no_wrap=column != "describes")
    for task, names, load, default in (("training", training_stack_names(), load_training_stack,
                                        default_training_stack()),
                                       ("serving", stack_names(), load_stack, default_stack())):
        for name in names:
            shown = f"{name} (default)" if name == default else name
            table.add_row(shown, task, " ".join(load(name).description.split()))
    console.print(table)
    console.print("training stacks for training tasks, serving stacks for task=inference of a generative model; "
                  "`madmax catalog show NAME` prints an entry with its sources")


def _gpu_row(name: str) -> list[str]:
    from madmax.config.loaders import load_gpu

    gpu = load_gpu(name)
    half = gpu.half_dtype
    return [f"{gpu.hbm_bytes / GIB:,.0f} GiB", f"{gpu.flops_per_s[half] / 1e12:,.0f} TFLOP/s {half.value}",
            f"{gpu.hbm_bytes_per_s / 1e12:,.2f} TB/s"]


def _system_row(name: str) -> list[str]:
    from madmax.config.loaders import load_system

    system = load_system(name)
    gpu, half = system.gpu, system.gpu.half_dtype
    price = system.price_per_gpu_hour_usd
    return [f"{system.gpus_per_node} x {gpu.name}", f"{gpu.hbm_bytes / GIB:,.0f} GiB",
            f"{gpu.flops_per_s[half] / 1e12:,.0f} TFLOP/s {half.value}",
            f"{system.scale_up.bytes_per_s / 1e9:,.0f} GB/s", f"{system.scale_out.bytes_per_s / 1e9:,.1f} GB/s",
            "" if price is None else f"${price:,.2f}"]


def _model_row(name: str) -> list[str]:
    from madmax.config.loaders import load_model
    from madmax.config.task import Task, TaskKind
    from madmax.workload import build_workload

    workload = build_workload(load_model(name), Task(kind=TaskKind.PRETRAIN))  # as `madmax.inspect` counts
    total, active = workload.total_params, workload.active
    return [_count(total), _count(active) if active != total else ""]


def _count(n: float) -> str:
    """A parameter count in billions (B), or millions (M) below a billion."""
    return f"{n / 1e9:,.2f} B" if n >= 1e9 else f"{n / 1e6:,.1f} M"


_CATALOG_COLUMNS = {
    "gpus": ("memory", "dense peak", "memory bandwidth"),
    "systems": ("node", "memory/GPU", "dense peak/GPU", "scale-up/GPU", "scale-out/GPU", "USD/GPU-h"),
    "models": ("parameters", "active"),
}
_CATALOG_ROWS = {"gpus": _gpu_row, "systems": _system_row, "models": _model_row}
