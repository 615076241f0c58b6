"""The public Python API; the CLI is a thin layer over it. `simulate(...).to_dict()` equals `--json`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from madmax.config.base import DType
from madmax.config.checks import whole_number
from madmax.config.hardware import System
from madmax.config.loaders import load_model
from madmax.config.model import ModelSpec
from madmax.config.strategy import Strategy, parse_strategy
from madmax.config.task import Task, TaskKind
from madmax.config.training_stack import load_training_stack
from madmax.config.units import GIB
from madmax.program import SERVING, builder_for
from madmax.request import TrainingRequest, resolve_request, resolve_training
from madmax.results import Result
from madmax.results.serving import ServingResult
from madmax.sim import gc_paused

if TYPE_CHECKING:
    from madmax.parallel.memory import Reserve

__all__ = ["Result", "ServingResult", "inspect", "simulate"]


def simulate(model: str | Path | dict | ModelSpec, system: str | Path | dict | System, num_gpus: int | None = None,
             task: str | Task | dict = "pretrain", global_batch: int | None = None, seq_len: int | None = None,
             dtype: str | None = None, strategy: str | dict | Strategy | None = None, *,
             batch: int | None = None, prompt_len: int | None = None, output_len: int | None = None,
             prompt_len_std: float | None = None, output_len_std: float | None = None, mode: str | None = None,
             kv_dtype: str | None = None, request_rate: float | None = None,
             num_requests: int | None = None, arrivals: str | Path | None = None, max_ttft: float | None = None,
             max_tpot: float | None = None, seed: int | None = None, stack: str | Path | dict | None = None,
             launch: str | None = None, engine: str | None = None, finetune: str | None = None,
             lora_rank: int | None = None, frozen_layers: int | None = None,
             lora_targets: list[str] | None = None, expert_load: str | float | None = None,
             capacity_factor: float | None = None, calibration: str | Path | None = None,
             keep_schedule: bool = False, price: float | None = None,
             power: float | None = None, tokens: float | None = None,
             reliability: str | Path | dict | None = None,
             checkpoint_interval: float | None = None, slo: str | dict | None = None,
             scenario: str | None = None, prefix_len: int | None = None,
             prefix_hit: float | None = None, speculative: str | None = None, draft_len: int | None = None,
             acceptance: float | None = None, draft_model: str | Path | dict | None = None
             ) -> Result | ServingResult:
    """Predict one training iteration, or a serving deployment, of `model` on `system` with `strategy`.

    Mirrors `madmax simulate`: names are catalog names or files; `strategy` uses the grammar
    `tp=8,pp=4,dp=32,cp=1,ep=1,vp=1,mbs=1,zero=1,recompute=selective,sp=1`; keys not given take
    defaults and dp is derived from the GPU count. `calibration`: a compute profile file (see
    `madmax calibrate`); default the shipped H200 profile. Raises `MadmaxError` for bad input; a
    strategy that does not fit in memory is a result with `fits == False`.

    Inference of a generative model (`task="inference"`) serves requests of `prompt_len` input and `output_len`
    output tokens in `mode` static (default), concurrency, saturation, rate or disaggregated (`madmax.serve`), with
    `batch` requests per replica, strategy tp, pp and dp (replicas) or the disaggregated workers, under the serving
    `stack` (trtllm default, vllm, vllm-0.14, sglang, trtllm-0.9) as `launch`ed (sized default: the engine's
    defaults raised where they cannot serve the load; engine: the defaults; aiconfigurator: its generator's
    settings), with `engine` settings over both ("max_num_tokens=16384,chunked_prefill=1"); `dtype` bf16, fp16, fp8,
    fp4 (NVFP4), int8 (W8A8), int4 (weight-only; awq, gptq) or mxfp4, `kv_dtype` bf16 or fp8; rate mode takes
    `request_rate` (requests/s) or an `arrivals` CSV (arrival_s, prompt_len, output_len), and `max_ttft`/`max_tpot`
    (s) for goodput. `prompt_len_std` / `output_len_std` (tokens) draw each request's lengths from a normal of mean
    prompt_len / output_len (aiperf's --isl-stddev / --osl-stddev; with `seed`) in modes concurrency, saturation,
    rate and disaggregated. `slo` ("p99_ttft=1,p99_tpot=50ms" or {"p99_ttft": 1.0}: mean, p50, p90 or p99 of ttft,
    tpot, itl or e2e, seconds) holds a rate-mode result against latency objectives (its `slo` block: each measured
    value, met, missed); without `request_rate` or `arrivals` it finds the highest Poisson rate the deployment
    serves within them (`madmax.serve.slo.highest_rate`) and returns the result at that rate. `scenario` runs an
    MLPerf Inference scenario (catalog/scenarios.yaml): offline (the saturation mode), server or interactive (the
    rate mode within its benchmark's p99 TTFT and TPOT limits, for the models a benchmark runs). `prefix_len`
    (tokens every prompt shares, a system prompt) turns on prefix caching: each engine keeps the prefix's KV cache
    once and a share `prefix_hit` (default 1) of the requests prefill only the rest of their prompt. `speculative`
    (ngram, eagle, mtp; or draft, a smaller model `draft_model` beside the served one) with `draft_len` k and
    `acceptance` a (mtp: 1 and 0.85 by default) verifies k + 1 tokens a request each decode step and gains
    (1 - a^(k+1)) / (1 - a) on average, after k passes of the drafter. Returns a `ServingResult`.

    Training takes `stack`, the training framework (`madmax.config.training_stack`): megatron-core
    (default), megatron-lm-2021, pytorch, fsdp2, deepspeed, megatron-deepspeed, automodel, torchtitan,
    torchtitan-compile, llm-foundry, olmo-core, nanotron, deepspeed-zero3, for recommendation models
    hugectr, torchrec or tf2, or a YAML file (`madmax catalog list stacks`); it sets which kernels are
    fused, the weight casts of each step, how ZeRO-3 gathers and gradient reductions are issued and in
    which dtype, and the runtime's host costs (its compute profiles).

    Mixture-of-experts models take `ep` (and `etp`, `ep_overlap`, `dispatch_fp8`) in the strategy, and
    `expert_load` ("balanced" default, a measured busiest-rank factor such as 1.3, or "zipf:ALPHA") and
    `capacity_factor` (tokens beyond it dropped; default dropless) for the routing.

    `price` (USD per GPU-hour) and `power` (W per GPU at load, the rest of the node included) replace the
    system's for the result's `cost` block (USD and joules per million tokens, `madmax.results.cost`), which a
    result carries when a price is known (catalog or `price`) or `power` is given.

    Training with `tokens` (tokens to train) adds the result's `time_to_train` block: the expected wall clock,
    GPU-hours, cost and energy of the whole run with failures, checkpoints, restarts and stragglers
    (`madmax.results.goodput`) under the `reliability` profile (catalog name, mapping or YAML file; default
    llama3-h100; "ideal" for none), checkpointing every `checkpoint_interval` seconds (default: the optimum).
    """
    _check_time_to_train(task, tokens, reliability, checkpoint_interval)
    if scenario is not None:
        return _simulate_scenario(locals())
    if slo is not None:
        return _simulate_slo(locals())
    requested = parse_strategy(strategy)
    request = resolve_request(model, system, num_gpus, task, calibration=calibration, flash=requested.flash,
                              global_batch=global_batch, seq_len=seq_len, dtype=dtype, batch=batch,
                              prompt_len=prompt_len, output_len=output_len, prompt_len_std=prompt_len_std,
                              output_len_std=output_len_std, mode=mode, kv_dtype=kv_dtype,
                              request_rate=request_rate, num_requests=num_requests,
                              arrivals=None if arrivals is None else str(arrivals), max_ttft_s=max_ttft,
                              max_tpot_s=max_tpot, seed=seed, launch=launch, engine=engine, finetune=finetune,
                              lora_rank=lora_rank, frozen_layers=frozen_layers, lora_targets=lora_targets,
                              expert_load=None if expert_load is None else str(expert_load),
                              capacity_factor=capacity_factor, prefix_len=prefix_len, prefix_hit=prefix_hit,
                              speculative=speculative, draft_len=draft_len, acceptance=acceptance,
                              draft_model=None if draft_model is None else (
                                  draft_model if isinstance(draft_model, dict) else str(draft_model)))
    if price is not None or power is not None:
        request = dataclasses.replace(request, system=request.system.with_costs(price, power))
    if builder_for(request.task.kind, request.workload) is SERVING:
        from madmax.serve import simulate_serving

        result = simulate_serving(request, requested, stack, keep_schedule)
        return _with_cost(result, request.system, power is not None, result.output_tokens_per_s, "output_tokens")
    training_stack = load_training_stack(stack)
    runtime = training_stack.calibration_for(request.task.kind is TaskKind.INFERENCE)
    if runtime and calibration is None:  # the stack's runtime, unless a profile is given
        request = dataclasses.replace(request, calibration=runtime)
    with gc_paused():
        run = dataclasses.replace(resolve_training(request, requested), stack=training_stack)
        if stack is not None:
            named = f"software stack: {training_stack.name} ({training_stack.description})"
            run = dataclasses.replace(run, assumptions=(*run.assumptions, named))
        result = _simulate_training(run, keep_schedule)
    result = _with_cost(result, request.system, power is not None, result.tokens_per_s, "tokens")
    if tokens is not None:
        result = _with_time_to_train(result, request.system, tokens, reliability, checkpoint_interval)
    return result


def _is_inference(task: Any) -> bool:
    """Whether `task` (a kind, a Task or its dict) serves requests."""
    kind = task.get("kind") if isinstance(task, dict) else getattr(task, "kind", task)
    return str(getattr(kind, "value", kind)).lower() == "inference"


def _simulate_scenario(call: dict[str, Any]) -> ServingResult:
    """`simulate(..., scenario=...)`: the MLPerf scenario's mode and SLOs (`config.scenarios`), its source noted."""
    from madmax.config.scenarios import scenario
    from madmax.errors import ConfigError

    if not _is_inference(call["task"]):
        raise ConfigError("scenario is an MLPerf Inference scenario; allowed: task=inference")
    chosen = scenario(call.pop("scenario"), load_model(call["model"]).name)
    if call["mode"] is not None and call["mode"] != chosen.mode:
        raise ConfigError(f"mode={call['mode']} conflicts with scenario={chosen.name}, which runs mode {chosen.mode}; "
                          "allowed: omit mode")
    if chosen.slo is not None and call["slo"] is not None:
        raise ConfigError(f"slo and scenario={chosen.name} both set the latency limits; allowed: one of them")
    call["mode"] = chosen.mode
    if chosen.slo is not None:
        call["slo"] = chosen.slo
    result = simulate(**call)
    return dataclasses.replace(result, assumptions=[chosen.note, *result.assumptions])


def _simulate_slo(call: dict[str, Any]) -> ServingResult:
    """`simulate(..., slo=...)`: a rate-mode run held against the SLOs, or, without a rate or arrivals, the
    highest rate that meets them (`madmax.serve.slo`)."""
    from madmax.errors import ConfigError
    from madmax.serve.slo import DEFAULT_REQUESTS, MIN_RATE, highest_rate, parse_slos, slo_block

    slos = parse_slos(call.pop("slo"))
    if not slos:
        raise ConfigError("slo is empty; allowed: SLOs such as p99_ttft=1,p99_tpot=50ms")
    if not _is_inference(call["task"]) or call["mode"] not in ("rate", "disaggregated"):
        raise ConfigError("slo holds a served deployment's latency percentiles against limits; allowed: "
                          "task=inference with mode=rate, or mode=disaggregated with arrivals at a request_rate")
    if call["mode"] == "disaggregated" and call["batch"] is not None:
        raise ConfigError("slo holds latency percentiles of requests arriving at a rate; batch runs the disaggregated "
                          "workers in a closed loop; allowed: request_rate (or no rate: the highest that meets the "
                          "SLOs), without batch")
    if call["request_rate"] is not None or call["arrivals"] is not None:
        result = simulate(**call)
        return dataclasses.replace(result, slo=slo_block(result, slos))
    if call["seed"] is not None:
        raise ConfigError("seed draws the Poisson arrivals of a request_rate; the highest-rate search uses the "
                          "default seed at every rate; allowed: omit seed, or give request_rate")

    def run(rate: float, n: int) -> ServingResult:
        return simulate(**{**call, "request_rate": rate, "num_requests": n, "keep_schedule": False})

    best, block = highest_rate(run, slos, call["num_requests"] or DEFAULT_REQUESTS)
    if best is None:
        raise ConfigError(f"no request rate down to {MIN_RATE:g}/s meets the SLOs: "
                          f"{'; '.join(block['missed_at_rate_missed'])}; allowed: looser SLOs or another layout")
    if call["keep_schedule"]:  # the search keeps no schedules: the best rate once more, with its schedule
        best = simulate(**{**call, "request_rate": block["highest_rate"], "num_requests": block["num_requests"]})
    return dataclasses.replace(best, slo=block)


def _check_time_to_train(task: Any, tokens: Any, reliability: Any, checkpoint_interval: Any) -> None:
    """ConfigError, before any simulation, when a time-to-train option would be silently dropped: given for
    serving, or reliability / checkpoint_interval without tokens."""
    from madmax.errors import ConfigError

    given = [n for n, v in (("tokens", tokens), ("reliability", reliability),
                            ("checkpoint_interval", checkpoint_interval)) if v is not None]
    if not given:
        return
    if _is_inference(task):
        raise ConfigError(f"{given[0]} applies to training (the time to train a token budget); allowed with "
                          "task=inference: the serving options")
    if tokens is None:
        raise ConfigError(f"{given[0]} applies to the time to train a token budget; allowed: give tokens too")


def _with_time_to_train(result: Result, system: System, tokens: float, reliability: Any,
                        checkpoint_interval: float | None) -> Result:
    """The result with its `time_to_train` block (`madmax.results.goodput.time_to_train`)."""
    from madmax.config.checks import positive_number
    from madmax.config.reliability import load_reliability
    from madmax.results.goodput import time_to_train

    tokens = positive_number(tokens, "tokens", "tokens to train")
    profile = load_reliability(reliability).with_interval(checkpoint_interval)
    return dataclasses.replace(result, time_to_train=time_to_train(result, system, tokens, profile))


def _with_cost(result, system: System, power_given: bool, tokens_per_s: float, kind: str):
    """The result with its `cost` block (per second of its throughput), when a price is known or power given."""
    from madmax.results.cost import cost_of

    if system.price_per_gpu_hour_usd is None and not power_given:
        return result
    return dataclasses.replace(result, cost=cost_of(system, 1.0, tokens_per_s, kind))


def _simulate_training(run: TrainingRequest, keep_schedule: bool) -> Result:
    """Plan, write the iteration's program, schedule it and read the result off the timeline."""
    from madmax.hardware.collectives import network_model
    from madmax.hardware.compute import compute_model
    from madmax.parallel.memory import checkpoint_state_bytes, runtime_reserve, stage_memory
    from madmax.program.costs import device_floor_s
    from madmax.program.training import build_training
    from madmax.results.launch import training_launches
    from madmax.results.training import TrainingRun, training_result
    from madmax.sim import schedule
    from madmax.validate.trust import error_band

    request = run.request
    reserved = runtime_reserve()
    stack = run.stack or load_training_stack(None)
    # A step replayed as one CUDA graph: the host issues no kernel of it, each runs at least the device's floor.
    compute = compute_model(request.system.gpu, request.calibration,
                            floor_s=device_floor_s() if stack.graph_step else None,
                            attention_kernel=stack.attention_kernel(request.system.gpu.architecture))
    network = network_model(request.system, compute.profile.network if request.calibration else ())
    run, choice, zero_note = _choose_zero(run, reserved, compute, network)
    strat = run.strategy
    plan, notes = _plan(run, reserved)
    notes += zero_note
    if choice is not None:
        notes += (choice.reason,)
    built = build_training(plan, compute, network)
    timeline = schedule(built.program)
    memories = [stage_memory(plan, stage, reserved) for stage in range(plan.num_stages)]
    sysm, n = request.system, request.num_gpus
    # The bands are residuals of the shipped profile (a user profile has its own accuracy), and only
    # a family with validation rows has one.
    band = None if request.calibration else error_band(
        request.spec.name, n, strat, sysm.gpu.name, architecture=sysm.gpu.architecture,
        kernels_from=_kernels_from(compute))
    if band is not None and "family" not in band["matched"]:
        band = None
    tables = bool(request.workload.tables)
    text = strat.describe(forward_only=request.task.kind is TaskKind.INFERENCE) + (_emb_keys(strat) if tables else "")
    info = TrainingRun(model=request.spec.name, system=sysm.name, num_gpus=n, task=request.task.kind.value,
                       dtype=request.task.dtype, strategy=strat, strategy_text=text,
                       global_batch=run.global_batch, seq_len=request.seq_len, hbm_bytes=sysm.gpu.usable_memory_bytes,
                       peak_flops_per_s=sysm.gpu.flops_per_s[request.task.dtype], has_tables=tables,
                       assumptions=(run.assumptions + notes + tuple(built.assumptions)
                                    + (compute.attention_notes if strat.flash and _has_attention(plan) else ())),
                       recompute_choice=None if choice is None else choice.reason,
                       sample_name=request.spec.sample_name,
                       forward_flops_per_token=request.workload.forward_flops_per_token(request.seq_len))
    result = training_result(info, plan, built, timeline, memories, band, keep_schedule)
    t = request.task
    if t.kind is TaskKind.INFERENCE:
        launches, why = [], f"{request.spec.name}'s inference pass has no launcher here"
    else:
        launches, why = training_launches(request.spec, plan.strategy, run.global_batch, request.seq_len, t.dtype,
                                          n, sysm.gpus_per_node,
                                          t.finetune.value if t.kind is TaskKind.FINETUNE else None)
    return dataclasses.replace(result, **checkpoint_state_bytes(plan, request.workload.total_params),
                               launch=[launch.to_dict() for launch in launches], launch_note=why)


def forward_pass(model: str | Path | dict | ModelSpec, system: str | Path | dict | System, num_gpus: int | None = None,
                 *, batch: int, seq_len: int, dtype: str | None = None, strategy: str | Strategy | None = None,
                 stack: str | Path | dict | None = None, calibration: str | Path | None = None) -> Result:
    """One forward pass of a language model over `batch` sequences of `seq_len` tokens, logits of every token and no
    backward: the scoring pass of RL post-training (`madmax.rl`: the log-probabilities of generated responses under
    the policy, a frozen reference, a critic or a reward model), run as the training stack runs it. Every block is
    frozen; the strategy's tp, pp, cp and expert degrees split it (no optimizer, so no ZeRO stage)."""
    request = resolve_request(model, system, num_gpus, "pretrain", calibration=calibration, global_batch=batch,
                              seq_len=seq_len, dtype=dtype)
    frozen = tuple(dataclasses.replace(b, trainable=False, ops=tuple(dataclasses.replace(op, trainable=False)
                                                                     for op in b.ops))
                   for b in request.workload.blocks)
    workload = dataclasses.replace(request.workload, blocks=frozen, generates_tokens=False)
    task = request.task.model_copy(update={"kind": TaskKind.INFERENCE, "batch": batch})
    request = dataclasses.replace(request, task=task, workload=workload)
    requested = strategy if isinstance(strategy, Strategy) else parse_strategy(strategy)
    keep = {"tp", "pp", "cp", "ep", "etp", "mbs", "sp", "vp", "flash"} & requested.model_fields_set
    requested = Strategy(**{k: getattr(requested, k) for k in keep})
    training_stack = load_training_stack(stack)
    runtime = training_stack.calibration_for(True)
    if runtime and calibration is None:
        request = dataclasses.replace(request, calibration=runtime)
    with gc_paused():
        run = dataclasses.replace(resolve_training(request, requested), stack=training_stack)
        return _simulate_training(run, False)


def _has_attention(plan) -> bool:
    """Whether the plan runs an attention kernel (a transformer; not a recommendation model)."""
    from madmax.parallel.kernels import KernelKind

    return any(k.kind is KernelKind.ATTENTION for unit in plan.units.values() for k in unit.fwd)


def _kernels_from(compute) -> str:
    """Where a GPU's kernel efficiencies come from, for the error band's note: the profile's device, and whether
    its large-GEMM level is rescaled by the GPU's own measured ceiling (efficiency.yaml gemm_ceiling)."""
    from madmax.hardware.profile import gemm_ceiling_scale

    gpu, device = compute.gpu, compute.profile.device
    if gemm_ceiling_scale((gpu.name, *gpu.aliases), device, DType.BF16, DType.BF16) is None:
        return f"{device}, used as measured"
    return f"{device}, rescaled by {gpu.name}'s measured large-GEMM ceiling"


# ZeRO stages a strategy that leaves `zero` unset may take, tried in order: the distributed optimizer (Megatron-Core's
# and Megatron-Bridge's default) first, then sharding the gradients, then the weights.
UNSET_ZERO_STAGES = (1, 2, 3)


def _choose_zero(run: TrainingRequest, reserved: Reserve, compute, network):
    """The run with its ZeRO stage and recompute resolved, the recompute choice (None: given) and why the stage.

    A strategy that names `zero` keeps it. Otherwise the first of `UNSET_ZERO_STAGES` whose plan fits (with its
    own recompute choice when recompute is unset); when none fits, the one that needs least memory. Every stage
    tried but the first is named in the reason, with what it needs.
    """
    from madmax.parallel.memory import stage_memory

    def resolved(r: TrainingRequest):
        if r.strategy.recompute is None:
            choice = _choose_recompute(r, reserved, compute, network)
            return dataclasses.replace(r, strategy=choice.strategy), choice
        return r, None

    if "zero" in run.strategy.model_fields_set:
        return (*resolved(run), ())
    capacity = run.request.system.gpu.usable_memory_bytes
    tried = []
    for zero in UNSET_ZERO_STAGES:
        r, choice = resolved(dataclasses.replace(run, strategy=run.strategy.model_copy(update={"zero": zero})))
        plan = choice.plan if choice is not None else _plan(r, reserved)[0]
        peak = max(stage_memory(plan, stage, reserved).total_bytes for stage in range(plan.num_stages))
        tried.append((peak, r, choice))
        if peak <= capacity:
            break
    if len(tried) == 1:
        return (*tried[0][1:], ())
    needs = ", ".join(f"zero={r.strategy.zero} needs {peak / GIB:.1f} GiB" for peak, r, _ in tried)
    peak, r, choice = min(tried, key=lambda t: t[0])
    why = (f"the lowest ZeRO stage that fits ({needs} of {capacity / GIB:.1f} GiB usable)" if peak <= capacity
           else f"the least memory, but no stage fits ({needs} of {capacity / GIB:.1f} GiB usable)")
    return r, choice, (f"zero not given: {r.strategy.zero}, {why}",)


def _choose_recompute(run: TrainingRequest, reserved: Reserve, compute, network):
    """The cheapest recompute that fits, for a strategy that leaves it unset (`madmax.parallel.recompute`)."""
    from madmax.parallel.memory import stage_memory
    from madmax.parallel.recompute import choose_recompute
    from madmax.program.costs import unit_times

    timed: dict[int, tuple[Any, float]] = {}  # by unit object: a plan's chunks name each unit once per layer

    def pass_s(unit) -> float:
        if id(unit) not in timed:  # the unit is kept beside its time, so its id is not reused
            t = unit_times(unit, compute, network, run.request.task.dtype)
            timed[id(unit)] = unit, (t.fwd_s + t.bwd_s + t.recompute_s
                                     + sum(seconds for *_, seconds in t.after_fwd + t.after_bwd))
        return timed[id(unit)][1]

    return choose_recompute(
        run.strategy, build=lambda s: _plan(dataclasses.replace(run, strategy=s), reserved)[0],
        memories=lambda plan: [stage_memory(plan, stage, reserved) for stage in range(plan.num_stages)],
        capacity=run.request.system.gpu.usable_memory_bytes, pass_s=pass_s)


def _plan(run: TrainingRequest, reserved: Reserve) -> tuple[Any, tuple[str, ...]]:
    """The plan and what it assumed; with emb_offload, embedding tables get the HBM the rest of the rank leaves and rows
    beyond it live in host memory."""
    from madmax.parallel.memory import stage_memory
    from madmax.parallel.plan import build_plan

    request = run.request

    def build(budget: float | None = None):
        return build_plan(request.workload, run.strategy, domain_size=request.system.scale_up_domain,
                          seq_len=request.seq_len, global_batch=run.global_batch, dtype=request.task.dtype,
                          table_budget_bytes=budget, routing=request.task.routing, stack=run.stack)

    plan = build()
    if request.workload.tables and run.strategy.emb_offload:
        memories = [stage_memory(plan, stage, reserved) for stage in range(plan.num_stages)]
        rest = max(m.total_bytes - m.tables_bytes for m in memories)
        hbm = request.system.gpu.usable_memory_bytes
        if any(m.tables_bytes + rest > hbm for m in memories):
            plan = build(max(0.0, hbm - rest))
            return plan, ("embedding rows beyond HBM are offloaded to host memory (no software cache): every lookup "
                          "of one crosses the host link, the forward reading its row, the backward reading the row "
                          "and its optimizer state and writing them back at once (full duplex, the host link's "
                          "bandwidth per direction)",)
    return plan, ()


def _emb_keys(strat: Strategy) -> str:
    """The embedding-sharding keys, shown for models with tables: `,emb=tw` (`,emb_group=G` in 2-D)."""
    return (f",emb={strat.emb}" + (f",emb_hot={strat.emb_hot:g}" if strat.emb_hot is not None else "")
            + (f",emb_dp_bytes={strat.emb_dp_bytes:g}" if strat.emb_dp_bytes is not None else "")
            + (f",emb_cold={strat.emb_cold}" if strat.emb_cold != "tw" else "")
            + (f",emb_shard_cost={strat.emb_shard_cost:g}" if strat.emb_shard_cost is not None else "")
            + (f",emb_group={strat.emb_group}" if strat.emb_group else "")
            + (",emb_offload=1" if strat.emb_offload else ""))


def inspect(model: str | Path | dict | ModelSpec, seq_len: int | None = None) -> dict[str, Any]:
    """The normalized model with parameter counts, FLOPs per token and bytes per parameter.

    total_params counts every weight (all experts, the multi-token-prediction modules); active_params those
    one token's forward pass through the main model uses (for a mixture of experts: top_k of the routed
    experts, `madmax.workload.transformer.active_params`; otherwise the total). forward_flops_per_token is
    likewise per token: a routed expert's GEMMs count top_k times, not num_experts times; it is the
    pre-training workload's, so it includes the multi-token-prediction modules where a model has them.
    """
    from madmax.workload import build_workload

    spec = load_model(model)
    seq = spec.default_seq_len if seq_len is None else whole_number(seq_len, "seq_len", unit="tokens")
    workload = build_workload(spec, Task(kind=TaskKind.PRETRAIN))
    counts = workload.params_by_component
    total = workload.total_params
    fwd = workload.forward_flops_per_token(seq)
    return {
        "model": spec.model_dump(mode="json"),
        "total_params": total,
        "active_params": workload.active,
        "params_by_component": counts,
        "seq_len": seq,
        "forward_flops_per_token": fwd,
        "training_flops_per_token": 3 * fwd,
        "bytes_per_param": {d.value: d.num_bytes for d in (DType.FP32, DType.BF16, DType.FP8)},
        "weights_bytes": {d.value: total * d.num_bytes for d in (DType.FP32, DType.BF16, DType.FP8)},
    }
