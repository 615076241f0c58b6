"""LLM serving: a deployment of replicas, its engines' steps, and the five modes (`serve.modes`).

`simulate_serving` resolves the deployment (`serve.deployment`), runs the mode, simulates one prefill
step and one decode step of the batch as programs (`program.serving`) for their times, breakdown and
trace, and assembles the result (`results.serving`).
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.checks import readable_file
from madmax.config.stack import ServingStack, launched, load_stack, weight_format_name, with_settings
from madmax.config.strategy import Strategy
from madmax.config.task import INFERENCE_ONLY_DTYPES, MAX_ARRIVAL_S, ServingMode
from madmax.config.units import GIB
from madmax.errors import ConfigError
from madmax.program.serving import build_step, stage_times
from madmax.request import Request
from madmax.results.launch import LaunchedReplica, disaggregated_launches, model_id, serving_launch
from madmax.results.serving import ServingResult, percentiles, step_breakdown
from madmax.serve import modes
from madmax.serve.deployment import (
    Formats,
    Replica,
    check_keys,
    check_request,
    draft_head,
    engine_settings,
    formats,
    replica,
    runtime_of,
    serving_strategy,
)
from madmax.serve.lengths import TRUNCATE_SIGMAS, Lengths
from madmax.serve.limits import limits
from madmax.sim import schedule

MAX_ARRIVALS = 10_000_000


def simulate_serving(request: Request, requested: Strategy, stack: str | Path | dict | ServingStack | None = None,
                     keep_schedule: bool = False) -> ServingResult:
    """Serve `request` (task kind inference) with `requested` (tp, pp, dp; or the disaggregated workers)."""
    t = request.task
    check_keys(requested, t.mode)
    check_request(request)
    fmt = formats(request)
    lengths = _request_lengths(request)
    prompt, output, arrival = _lengths(request, lengths)
    if t.prefix_len and int(np.min(prompt)) <= t.prefix_len:
        raise ConfigError(f"task.prefix_len={t.prefix_len} is not shorter than every prompt (the shortest has "
                          f"{int(np.min(prompt))} tokens); allowed: a shared prefix shorter than every prompt")
    p_mean, o_mean = float(np.mean(prompt)), float(np.mean(output))
    context = p_mean + o_mean
    # The longest prompt and request any engine can be given (drawn lengths: their bounds, not the sample's).
    max_prompt = max(int(np.max(prompt)), lengths.longest[0])
    longest = max(float(np.max(prompt + output)), float(sum(lengths.longest)))
    if t.mode is ServingMode.DISAGGREGATED:
        return _disaggregated(request, requested, load_stack(stack), fmt, lengths, p_mean, o_mean, keep_schedule)
    engine_stack, launch_notes = _launch(load_stack(stack), request, "agg", max_prompt)
    runtime = runtime_of(request, engine_stack)
    strategy = serving_strategy(request, requested, requested.tp, requested.pp, ep=requested.ep, etp=_etp(requested))
    static = t.mode is ServingMode.STATIC
    batch = t.batch or engine_stack.max_batch
    prompts = min(math.ceil(batch / strategy.pp), engine_stack.prompts_per_step(int(p_mean)))
    step_tokens = prompts * int(p_mean) if static else engine_stack.max_num_tokens
    sequences = prompts if static else min(engine_stack.max_batch, engine_stack.max_num_tokens)
    rep = replica(request, strategy, engine_stack, fmt, step_tokens, sequences, context)
    # When the longest request does not fit, the run is simulated as though the cache had room, and reported
    # as not fitting.
    dep = modes.Deployment(rep, runtime, strategy.dp, context, unbounded_kv=not rep.holds(longest),
                           **engine_settings(request))
    notes: list[str] = [*launch_notes, *_lengths_note(lengths, p_mean, o_mean)]
    if t.mode is ServingMode.SATURATION:
        cap = max(1, min(t.batch or rep.max_sequences or 1, rep.max_sequences or 1,
                         engine_stack.max_batch * strategy.pp))
        outcome = modes.saturation(dep, cap, lengths, t.num_requests)
        batch = outcome.batch
    elif static:
        outcome = modes.static(dep, batch, int(p_mean), int(o_mean), _static_prefill_s(dep, batch, int(p_mean), notes))
    elif t.mode is ServingMode.CONCURRENCY:
        outcome = modes.closed_loop(dep, batch, lengths, t.num_requests)
    else:
        outcome = modes.open_loop(dep, arrival, prompt, output)
        batch = 0
    notes += outcome.notes
    if t.speculative is not None:
        notes.append(_speculative_note(request, dep))
    if t.prefix_len:
        share = (f"{outcome.cached_share:.1%} of the prompt tokens came from the cache in this run" if not static
                 else "a static batch is served by a warm engine")
        notes.append(f"prefix caching: every prompt starts with the same {t.prefix_len:,} tokens, whose KV cache each "
                     f"engine keeps once after computing it; {t.prefix_hit:.0%} of the requests find it and prefill "
                     f"only the rest of their prompt ({share}); max batch by memory counts no sharing")
    return _result(request, dep, fmt, engine_stack, outcome, batch, p_mean, o_mean, notes, keep_schedule,
                   _describe(strategy, request.spec.has_experts))


def _speculative_note(request: Request, dep: modes.Deployment) -> str:
    t = request.task
    a, k = t.drafting
    draft = request.draft
    drafter = {"ngram": "n-gram lookups in the context (no GPU work)",
               "eagle": f"an EAGLE head (each drafted token {dep.draft_fraction:.1%} of a decode step's weight reads)",
               "mtp": f"the model's MTP modules (each drafted token {dep.draft_fraction:.1%} of a decode step's "
                      "weight reads)",
               "draft": f"the draft model {draft.name if draft else ''} on the same GPUs (each drafted token one "
                        "decode step of it; it prefills every prompt into its own KV cache)"}[t.speculative.value]
    return (f"speculative decoding: {k} token(s) drafted a step by {drafter}, each accepted with chance {a:g}: "
            f"{dep.tokens_per_step:.3g} tokens a step on average, each step verifying {k + 1} tokens a request; "
            "tokens come in bursts (mean-field: inter-token latency is the step over the tokens it gains)")


def _request_lengths(request: Request) -> Lengths:
    """The task's prompt and output tokens per request: fixed, or normal of the given standard deviations."""
    t = request.task
    return Lengths(t.prompt_len or 0, t.output_len or 0, t.prompt_len_std, t.output_len_std, t.seed)


def _lengths_note(lengths: Lengths, prompt_mean: float, output_mean: float) -> list[str]:
    """What drawn request lengths were (nothing for fixed ones)."""
    if not lengths.spread:
        return []
    (p_hi, o_hi), k = lengths.longest, TRUNCATE_SIGMAS

    def one(name: str, mean: int, std: float, hi: int, sample: float) -> str:
        if not std:
            return f"{name} {mean:,} tokens each"
        return f"{name} normal of mean {mean:,} and std {std:g} tokens within [1, {hi:,}] (sample mean {sample:,.0f})"

    return [f"request lengths drawn per request with seed {lengths.seed}, as aiperf's --isl-stddev/--osl-stddev: "
            f"{one('prompts', lengths.prompt, lengths.prompt_std, p_hi, prompt_mean)}; "
            f"{one('outputs', lengths.output, lengths.output_std, o_hi, output_mean)} (a draw beyond mean + {k} "
            "std or below 1 is drawn again); the engine is sized by the longest"]


def _lengths(request: Request, lengths: Lengths) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prompt and output tokens of every request, and arrivals (rate mode: Poisson or the arrivals CSV). Drawn
    lengths are sampled here too (the first num_requests, or RATE_REQUESTS), for the means that size the engine."""
    t = request.task
    if t.arrivals is not None:
        return read_arrivals(Path(t.arrivals), request.spec.max_seq_len)
    n = t.num_requests or modes.RATE_REQUESTS
    arrival = modes.poisson_arrivals(t.request_rate, n, t.seed) if t.request_rate else np.zeros(n)
    prompt, output = lengths.draw(n)
    return prompt, output, arrival


def read_arrivals(path: Path, max_seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSV of requests: arrival_s, prompt_len, output_len (a header row naming them)."""
    readable_file(path, "task.arrivals")
    try:
        rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"task.arrivals file {str(path)!r} cannot be read: {exc.__class__.__name__}") from None
    if not rows:
        raise ConfigError(f"task.arrivals file {str(path)!r} has no requests; allowed: a CSV with columns "
                          "arrival_s, prompt_len, output_len and one row per request")
    if len(rows) > MAX_ARRIVALS:
        raise ConfigError(f"task.arrivals has {len(rows)} requests; allowed: at most {MAX_ARRIVALS}")
    cols: dict[str, list[float]] = {"arrival_s": [], "prompt_len": [], "output_len": []}
    for line, row in enumerate(rows, start=2):
        for name, values in cols.items():
            text = (row.get(name) or "").strip()
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(f"task.arrivals line {line}: {name}={text!r} is not a number; allowed: columns "
                                  "arrival_s (s, >= 0), prompt_len and output_len (positive integers)") from None
            if (not math.isfinite(value) or value < 0 or (name == "arrival_s" and value > MAX_ARRIVAL_S)
                    or (name != "arrival_s" and (value < 1 or value != int(value)))):
                raise ConfigError(f"task.arrivals line {line}: {name}={text!r} is out of range; allowed: "
                                  f"arrival_s in [0, {MAX_ARRIVAL_S:g}] s, prompt_len and output_len positive integers")
            values.append(value)
        if cols["prompt_len"][-1] + cols["output_len"][-1] > max_seq_len:
            raise ConfigError(f"task.arrivals line {line}: prompt_len + output_len exceeds max_seq_len={max_seq_len}")
    order = np.argsort(cols["arrival_s"], kind="stable")
    arr = (np.asarray(cols[k])[order] for k in ("prompt_len", "output_len", "arrival_s"))
    prompt, output, arrival = arr
    return prompt.astype(int), output.astype(int), arrival - arrival[0]


def _launch(stack: ServingStack, request: Request, role: str, prompt: int, batch: int | None = None
            ) -> tuple[ServingStack, list[str]]:
    """The stack as the task launches it for a worker of `role` (`config.stack.launched`), with the task's
    engine settings over it, checked against the longest prompt; and the launch's notes."""
    t = request.task
    launched_stack, notes = launched(stack, t.launch, batch or t.batch or stack.max_batch, prompt, role)
    final = with_settings(launched_stack, t.engine)
    if not final.chunked_prefill and prompt > final.max_num_tokens and role != "decode":
        raise ConfigError(f"task.prompt_len={prompt} exceeds the {final.max_num_tokens}-token step of stack "
                          f"{final.name}, which does not chunk prompts; allowed: prompt_len <= "
                          f"{final.max_num_tokens}, or engine max_num_tokens >= {prompt} or chunked_prefill=1 "
                          "(--engine), or launch sized")
    if t.engine:
        notes.append(f"engine settings {t.engine} over stack {final.name}")
    return final, notes


def _static_prefill_s(dep: modes.Deployment, batch: int, prompt: int, notes: list[str]) -> float:
    """The batch's prefill: one simulated step (a round of micro-batches) when its prompts fit the stack's
    token budget, else consecutive steps of as many whole prompts as fit, the batch's first tokens at the
    end of the last (the steps before it recur at the step period, the last one a simulated round)."""
    per_engine = math.ceil(batch / dep.pp)
    stack = dep.runtime.stack
    fit = stack.prompts_per_step(math.ceil(prompt - dep.prefix * dep.prefix_hit))  # a cached prefix is not computed
    sizes = modes.prefill_rounds(per_engine, fit)
    if len(sizes) > 1:
        notes.append(f"static batch: {per_engine} prompts of {prompt} tokens exceed stack {stack.name}'s "
                     f"{stack.max_num_tokens}-token step; prefilled in {len(sizes)} steps of up to {fit} prompts")
    step = dep.prefill_step(sizes[-1], prompt)
    last = dep.simulate(step)[0] + dep.draft_s(step)  # a draft model prefills the prompts too
    # the steps before the last are all full ones: timed once, times their count (a batch of millions of
    # prompts is as quick to answer as one of a few)
    return (len(sizes) - 1) * dep.step_s(dep.prefill_step(fit, prompt)) + last if len(sizes) > 1 else last


def _etp(requested: Strategy) -> int | None:
    """The etp the user gave, else None (the default of `expert_degrees`)."""
    return requested.etp if "etp" in requested.model_fields_set else None


def _describe(s: Strategy, has_experts: bool = False) -> str:
    text = f"tp={s.tp},pp={s.pp},dp={s.dp}"
    return text + (f",ep={s.ep},etp={s.etp}" + _overlap(s) if has_experts else "")


def _overlap(s: Strategy) -> str:
    """The expert exchange's options that differ from the defaults, in the strategy grammar."""
    return (",ep_overlap=1" * s.ep_overlap + ",dispatch_fp8=1" * s.dispatch_fp8
            + (f",dispatcher={s.dispatcher}" if s.dispatcher != "alltoall" else ""))


def _result(request: Request, dep: modes.Deployment, fmt: Formats, stack: ServingStack, outcome: modes.Outcome,
            batch: int, prompt: float, output: float, notes: list[str], keep_schedule: bool,
            strategy_text: str, prefill_dep: modes.Deployment | None = None) -> ServingResult:
    """Metrics of the outcome, step times and breakdown of the batch's prefill and decode, memory.

    The steps shown are those of the requests in flight spread over the engines: `batch` per replica
    (aggregated), `batch` in all (disaggregated, `prefill_dep` the prefill workers), or in rate mode the
    requests in flight on average (Little's law: requests/s x mean latency).
    """
    t, sysm, rep = request.task, request.system, dep.replica
    n = sysm.cluster_gpus
    pre_dep = prefill_dep or dep
    in_flight = (batch * (1 if prefill_dep else dep.replicas)) or round(outcome.requests_per_s
                                                                        * outcome.mean("e2e_s"))
    in_flight = max(1, in_flight)
    shown = math.ceil(in_flight / dep.replicas)  # per replica (decode workers), for memory
    per_engine = math.ceil(in_flight / dep.engines)
    prompts = math.ceil(in_flight / pre_dep.engines)
    fit = stack.prompts_per_step(int(prompt))
    _, pre_prog, pre_sched = pre_dep.simulate(pre_dep.prefill_step(min(prompts, fit), int(prompt)))
    prefill_s = _static_prefill_s(pre_dep, prompts * pre_dep.pp, int(prompt), [])
    decode_s, dec_prog, dec_sched = dep.simulate(dep.decode_step(per_engine, prompt + output / 2))
    static = t.mode is ServingMode.STATIC
    memory, fits, reason = _memory(request, rep, shown, stack, static)
    closed = t.mode in (ServingMode.CONCURRENCY, ServingMode.SATURATION)
    held = [] if static else limits(dep, outcome, batch or in_flight, int(prompt), int(output), prefill_s, closed,
                                    outcome.arrival_rate)
    tokens_per_s = outcome.output_tokens_per_s + outcome.prompt_tokens_per_s
    peak = sysm.gpu.flops_per_s[fmt.gemm] * n
    # Every token passes the layers; the LM head and sampling run once per generated token.
    context = max(1, int(prompt + output / 2))
    head = request.workload.sequence_flops(context)
    body = request.workload.forward_flops_per_token(context) - head / context
    critical = max(range(rep.plan.num_stages), key=lambda s: dec_sched.end_s[dec_prog.spans[(0, s)][1]]
                   - dec_sched.start_s[dec_prog.spans[(0, s)][0]])
    rank = f"stage{critical}"
    breakdown = {"stage": critical,
                 "prefill": step_breakdown(pre_sched, "stage0", stage_times(pre_dep.replica.plan, pre_dep.runtime, 0,
                                                                            pre_prog.step).compute_by_kind,
                                           stack.host_step_s),
                 "decode": step_breakdown(dec_sched, rank, stage_times(rep.plan, dep.runtime, critical,
                                                                       dec_prog.step).compute_by_kind,
                                          stack.host_step_s)}
    latency = goodput = None
    served_at_rate = t.mode is ServingMode.RATE or (t.mode is ServingMode.DISAGGREGATED and t.request_rate)
    if served_at_rate or t.max_ttft_s or t.max_tpot_s:
        latency, goodput = _latency(outcome, t.max_ttft_s, t.max_tpot_s)
    launches, launch_note = _launches(request, dep, fmt, stack, prefill_dep)
    kv_per_token = sum(rep.plan.kv_bytes(s, prompt + output) for s in range(rep.plan.num_stages)) * rep.plan.tp
    if (drafter := draft_head(request)) is not None:  # the draft head caches one more layer
        kv_per_token *= 1 + 1 / drafter.layers
    if rep.draft_plan is not None:  # a draft model caches its own keys and values
        kv_per_token += rep.draft_plan.kv_bytes(0, prompt + output) * rep.draft_plan.tp
    return ServingResult(
        model=request.spec.name, system=sysm.name, num_gpus=n, task=t.kind.value, mode=t.mode.value,
        stack=stack.name, strategy=strategy_text, dtype=fmt.label, kv_dtype=fmt.kv.value, batch=batch,
        prompt_len=prompt, output_len=output, max_batch_by_memory=rep.max_sequences,
        ttft_s=outcome.mean("ttft_s"), tpot_s=outcome.mean("tpot_s"), e2e_latency_s=outcome.mean("e2e_s"),
        prefill_time_s=prefill_s, decode_step_time_s=decode_s, output_tokens_per_s=outcome.output_tokens_per_s,
        output_tokens_per_s_per_gpu=outcome.output_tokens_per_s / n, requests_per_s=outcome.requests_per_s,
        tokens_per_s=tokens_per_s, mfu=(tokens_per_s * body + outcome.output_tokens_per_s * head) / peak,
        kv_cache_bytes_per_token=kv_per_token / (prompt + output), weights_bytes_per_gpu=rep.weights_bytes,
        peak_memory_bytes=memory["total"], fits=fits, fits_reason=reason, breakdown=breakdown, memory=memory,
        assumptions=[*request.assumptions, *notes, *_assumed(request, stack, fmt),
                     *dep.runtime.graph.attention_notes],
        limits=held, latency=latency, launch=launches, launch_note=launch_note,
        goodput=goodput,
        schedule=_trace(dep, pre_prog.step, dec_prog.step) if keep_schedule else None)


def _memory(request: Request, rep: Replica, batch: int, stack: ServingStack, static: bool
            ) -> tuple[dict, bool, str | None]:
    """Memory per GPU of the worst stage with `batch` requests' KV caches (at most the pool's), and whether
    it fits: the weights, activations, reserve and one request's cache must; a static batch's every cache
    must too, while a served batch beyond the pool queues (`serve.limits` names it)."""
    hbm = request.system.gpu.usable_memory_bytes
    held = min(batch, rep.max_sequences) if rep.max_sequences else batch
    kv = held * rep.kv_bytes_per_sequence
    t = request.task
    if t.prefix_len and held:  # the shared prefix's cache held once, each request's own tokens beside it
        context = (t.prompt_len or 0) + (t.output_len or 0)
        if context:
            per_token = rep.kv_bytes_per_sequence / context
            kv = per_token * (held * (context - t.prefix_len * t.prefix_hit) + t.prefix_len)
    memory = {"weights": rep.weights_bytes, "kv_cache": kv, "activations": rep.workspace_bytes,
              "reserved": rep.reserved_bytes}
    memory["total"] = sum(memory.values())
    memory["kv_pool"] = rep.pool_bytes
    memory["capacity"] = hbm
    per_request = rep.kv_bytes_per_sequence / GIB
    if rep.max_sequences < 1:
        return memory, False, (f"weights {rep.weights_bytes / GIB:.1f} GiB, activations "
                               f"{rep.workspace_bytes / GIB:.1f} GiB and reserve {rep.reserved_bytes / GIB:.1f} GiB "
                               f"leave stack {stack.name}'s KV pool no room for one request's cache of "
                               f"{per_request:.2f} GiB on a GPU of {hbm / GIB:.0f} GiB")
    if batch > rep.max_sequences and static:
        return memory, False, (f"batch {batch} needs the KV cache of {batch} requests per replica but the pool "
                               f"holds {rep.max_sequences} ({rep.pool_bytes / GIB:.1f} GiB per GPU, "
                               f"{per_request:.3f} GiB each); allowed: batch <= {rep.max_sequences}")
    return memory, True, None


def _latency(outcome: modes.Outcome, max_ttft: float | None, max_tpot: float | None):
    """Percentiles of TTFT, TPOT, inter-token latency and end-to-end latency; goodput within the limits."""
    latency = {"ttft_s": percentiles(outcome.ttft_s, outcome.weight),
               "tpot_s": percentiles(outcome.tpot_s, outcome.tpot_weight),
               "itl_s": percentiles(outcome.tokens.seconds, outcome.tokens.counts),
               "e2e_latency_s": percentiles(outcome.e2e_s, outcome.weight)}
    if max_ttft is None and max_tpot is None:
        return latency, None
    ok = np.ones(len(outcome.ttft_s), dtype=bool)
    if max_ttft is not None:
        ok &= outcome.ttft_s <= max_ttft
    if max_tpot is not None and len(outcome.tpot_s) == len(ok):
        ok &= outcome.tpot_s <= max_tpot
    fraction = float(np.average(ok, weights=outcome.weight)) if len(ok) else 0.0
    return latency, {"requests_per_s": fraction * outcome.requests_per_s, "fraction": fraction,
                     "max_ttft_s": max_ttft, "max_tpot_s": max_tpot}


def _launches(request: Request, dep: modes.Deployment, fmt: Formats, stack: ServingStack,
              prefill_dep: modes.Deployment | None = None) -> tuple[list[dict], str | None]:
    """The engine command of one replica (`madmax.results.launch`), or why there is none; disaggregated (with
    `prefill_dep`, the prefill workers): the prefill servers', the decode servers' and the router's."""
    if prefill_dep is not None:
        launches, why = disaggregated_launches(request.spec, _launched(request, prefill_dep, fmt),
                                               _launched(request, dep, fmt), prefill_dep.runtime.stack, stack)
        return [launch.to_dict() for launch in launches], why
    launch, why = serving_launch(request.spec, _launched(request, dep, fmt), stack)
    return ([launch.to_dict()] if launch is not None else []), why


def _launched(request: Request, dep: modes.Deployment, fmt: Formats) -> LaunchedReplica:
    """What the launcher needs of a deployment's engines."""
    t, s, a = request.task, dep.replica.strategy, dep.attention_dp
    _, k = t.drafting
    return LaunchedReplica(tp=s.tp, pp=s.pp, ep=s.ep, etp=s.etp, attention_dp=a, engines=max(1, dep.replicas // a),
                           kv_fp8=fmt.kv is DType.FP8, weights=fmt.label,
                           speculative=t.speculative.value if t.speculative is not None else None, draft_len=k,
                           draft_model=None if request.draft is None else model_id(request.draft))


def _assumed(request: Request, stack: ServingStack, fmt: Formats) -> list[str]:
    notes = [f"serving stack {stack.label}: {stack.description}"]
    if fmt.label in INFERENCE_ONLY_DTYPES:  # the serving-only weight formats say what they are and how they run
        read = f"{fmt.weight_bytes_per_param:g} bytes per weight with scales"
        math_in = (f"read into {fmt.gemm.value} GEMMs" if fmt.weight_width is not None
                   else f"GEMMs on {fmt.gemm.value} tensor cores")
        notes.append(f"weights {weight_format_name(fmt.label)}: {read}, {math_in} (catalog serving.yaml "
                     "weight_formats)")
    if request.system.gpu.name not in ("h100-sxm", "h200"):
        notes.append(f"serving stack defaults are those of an H100-class GPU; gpu {request.system.gpu.name} may "
                     "differ (vLLM's token budget is 2048 on A100 and GPUs under 70 GB)")
    return notes


def _trace(dep: modes.Deployment, prefill, decode):
    """One program with a prefill step, then a decode step, for the Perfetto trace."""
    pre = build_step(dep.replica.plan, dep.runtime, prefill, "prefill")
    build_step(dep.replica.plan, dep.runtime, decode, "decode", program=pre.program,
          after=max(last for _, last in pre.spans.values()))
    return schedule(pre.program)


@dataclass(frozen=True)
class Workers:
    """The prefill and decode workers of a disaggregated deployment, as launched: their Deployments (each worker's
    attention-data-parallel ranks its replicas), strategies, stacks, launch notes, and the KV transfer."""

    prefill: modes.Deployment
    decode: modes.Deployment
    prefill_strategy: Strategy
    decode_strategy: Strategy
    decode_stack: ServingStack
    notes: list[str]
    prompt_kv: Callable[[float], float]  # the busiest prefill stage's share of a prompt's cache, bytes per GPU
    transfer_s: Callable[[float], float]  # seconds to send a prompt's cache from a prefill to a decode worker


def disaggregated_workers(request: Request, requested: Strategy, stack: ServingStack, fmt: Formats | None = None,
                          lengths: Lengths | None = None, prompt: float | None = None,
                          output: float | None = None) -> Workers:
    """The workers of strategy prefill_workers, prefill_tp, ..., decode_pp over the request's GPUs, checked (the
    formats, lengths and mean prompt and output default to the request's)."""
    t, n = request.task, request.num_gpus
    fmt = formats(request) if fmt is None else fmt
    lengths = _request_lengths(request) if lengths is None else lengths
    prompt = float(t.prompt_len) if prompt is None else prompt
    output = float(t.output_len) if output is None else output
    pw, dw = requested.prefill_workers, requested.decode_workers
    if pw is None or dw is None:
        raise ConfigError("mode disaggregated needs strategy.prefill_workers and strategy.decode_workers (with "
                          "prefill_tp, prefill_pp, decode_tp, decode_pp, default 1); e.g. "
                          "prefill_workers=4,prefill_tp=1,decode_workers=1,decode_tp=4")
    ps = serving_strategy(request, requested, requested.prefill_tp, requested.prefill_pp, "prefill_",
                          ep=requested.prefill_ep)
    ds = serving_strategy(request, requested, requested.decode_tp, requested.decode_pp, "decode_",
                          ep=requested.decode_ep)
    # A worker is dp attention replicas of tp x pp GPUs (dp > 1: attention data parallelism).
    used = pw * ps.tp * ps.pp * ps.dp + dw * ds.tp * ds.pp * ds.dp
    if used != n:
        raise ConfigError(f"prefill_workers*prefill_tp*prefill_pp + decode_workers*decode_tp*decode_pp = {used} GPUs "
                          f"(times the attention-data-parallel replicas of a worker, prefill_ep / prefill_tp and "
                          f"decode_ep / decode_tp when larger) but num_gpus={n}; allowed: workers that use all {n} "
                          "GPUs")
    context = prompt + output
    longest_prompt, longest_output = lengths.longest
    concurrency = t.batch or 0
    pre_stack, pre_notes = _launch(stack, request, "prefill", longest_prompt, batch=1)
    dec_stack, dec_notes = _launch(stack, request, "decode", longest_prompt,
                                   batch=math.ceil(concurrency / (dw * ds.dp)) if concurrency else None)
    runtime = runtime_of(request, pre_stack)
    pre_rep = replica(request, ps, pre_stack, fmt, pre_stack.max_num_tokens, pre_stack.max_num_tokens, prompt)
    dec_rep = replica(request, ds, dec_stack, fmt, dec_stack.max_batch, dec_stack.max_batch, context)
    pre = modes.Deployment(pre_rep, runtime, pw * ps.dp, prompt, unbounded_kv=not pre_rep.holds(longest_prompt))
    dec = modes.Deployment(dec_rep, runtime_of(request, dec_stack), dw * ds.dp, context,
                           unbounded_kv=not dec_rep.holds(longest_prompt + longest_output))
    domain = request.system.scale_up_domain
    span = Span(2, 1) if n <= domain else Span(1, 2)

    def prompt_kv(tokens: float) -> float:
        return max(pre_rep.plan.kv_bytes(s, tokens) for s in range(pre_rep.plan.num_stages))

    @functools.cache
    def transfer_s(tokens: float) -> float:  # each request's, for its own prompt
        return runtime.network.collective_s(Collective.SEND_RECV, prompt_kv(tokens), span)

    notes = [*(f"prefill workers: {note}" for note in pre_notes), *(f"decode workers: {note}" for note in dec_notes)]
    return Workers(pre, dec, ps, ds, dec_stack, notes, prompt_kv, transfer_s)


def _disaggregated(request: Request, requested: Strategy, stack: ServingStack, fmt: Formats, lengths: Lengths,
                   prompt: float, output: float, keep_schedule: bool) -> ServingResult:
    """Prefill workers and decode workers (strategy prefill_workers, prefill_tp, ..., decode_pp)."""
    t = request.task
    w = disaggregated_workers(request, requested, stack, fmt, lengths, prompt, output)
    pre, dec, ps, ds, dec_stack = w.prefill, w.decode, w.prefill_strategy, w.decode_strategy, w.decode_stack
    pw, dw = requested.prefill_workers, requested.decode_workers
    concurrency = t.batch or 0
    span_inter = request.num_gpus > request.system.scale_up_domain
    per_gpu, transfer = w.prompt_kv(prompt), w.transfer_s(prompt)  # the mean prompt's, for the note
    total = t.num_requests or (modes.RATE_REQUESTS if t.request_rate
                               else modes.REQUESTS_PER_SLOT * max(concurrency, 1))
    arrival = modes.poisson_arrivals(t.request_rate, total, t.seed) if t.request_rate else None
    outcome = modes.disaggregated(modes.Disaggregated(pre, dec, w.transfer_s), arrival, concurrency, lengths, total)
    text = (f"prefill_workers={pw},prefill_tp={ps.tp},prefill_pp={ps.pp},decode_workers={dw},decode_tp={ds.tp},"
            f"decode_pp={ds.pp}")
    if request.spec.has_experts:
        text += f",prefill_ep={ps.ep},decode_ep={ds.ep}" + _overlap(ps)
    notes = [*w.notes, *_lengths_note(lengths, prompt, output),
             f"KV cache of {'a mean' if lengths.spread else 'a'} prompt sent from prefill to decode worker in "
             f"{transfer * 1e3:.3f} ms ({per_gpu / 2**20:.1f} MiB per GPU over the "
             f"{'scale-out' if span_inter else 'scale-up'} fabric)"
             + ("; each request sends its own prompt's cache" if lengths.spread else "")]
    return _result(request, dec, fmt, dec_stack, outcome, concurrency, prompt, output, notes, keep_schedule, text,
                   prefill_dep=pre)
