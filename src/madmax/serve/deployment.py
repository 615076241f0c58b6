"""A serving deployment, resolved: the replica's plan, the engine's runtime, memory and the KV pool.

`check_request`, `check_keys` and `serving_strategy` check what a user can get wrong about an inference
request (lengths, the strategy keys that apply, tensor- and expert-parallel divisibility); `replica` builds
the plan of a replica (`parallel.serving`) and its memory, `runtime_of` the runtime of the serving stack
(`program.serving`).

The strategy of a mixture-of-experts model: `tp` and `pp` of a replica (its attention), `dp` replicas
(derived), and the experts over ep x etp GPUs of a stage, etp = tp / ep by default when ep divides tp (else
1). ep x etp = tp splits the experts inside each replica; ep x etp = a x tp (a > 1) makes a replicas one
engine with attention data parallelism (`parallel.serving`); anything else is refused.

Memory per GPU of the worst stage: weights, the activations of the largest step, the software's
reserve (`catalog/runtime.yaml`) and the KV cache. The KV pool is what the engine gives the cache: a
fraction of all HBM less the rest (vLLM, SGLang) or a fraction of what the rest leaves (TensorRT-LLM);
`max_batch_by_memory` is how many requests of prompt_len + output_len tokens it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from madmax.config.base import DType
from madmax.config.stack import KVPoolBasis, ServingStack, weight_bytes_per_param
from madmax.config.strategy import Strategy
from madmax.config.task import ServingMode
from madmax.errors import ConfigError, StrategyError
from madmax.hardware.collectives import network_model
from madmax.parallel.memory import runtime_reserve
from madmax.parallel.serving import ServingPlan, attention_dp, build_serving_plan
from madmax.program.serving import Runtime, make_runtime
from madmax.request import Request, gemm_format
from madmax.serve.lengths import TRUNCATE_SIGMAS, Lengths

# Strategy keys of a serving run; the rest are training's.
SERVING_KEYS = ("tp", "pp", "dp", "order", "ep", "etp", "ep_overlap", "dispatch_fp8", "dispatcher")
DISAGGREGATED_KEYS = ("prefill_workers", "prefill_tp", "prefill_pp", "prefill_ep", "decode_workers", "decode_tp",
                      "decode_pp", "decode_ep")


@dataclass(frozen=True)
class Formats:
    """Number formats of a serving run: activations, the quantized GEMMs, their weights, the KV cache."""

    act: DType
    gemm: DType
    weight_width: float | None
    weight_bytes_per_param: float
    kv: DType
    label: str  # what the user asked for (dtype), e.g. "int4"


@dataclass(frozen=True)
class Replica:
    """One replica's (or worker's) plan and its memory per GPU of the worst stage."""

    strategy: Strategy
    plan: ServingPlan
    weights_bytes: float
    workspace_bytes: float
    reserved_bytes: float
    pool_bytes: float  # KV pool per GPU of the tightest stage
    kv_bytes_per_sequence: float  # KV of one request of the run's length on that stage
    pool_by_stage: tuple[float, ...]  # KV pool per GPU of each stage
    draft_plan: ServingPlan | None = None  # speculative=draft: the draft model beside the target, same tp

    @property
    def max_sequences(self) -> int:
        """Requests of the run's length whose KV cache the pool holds."""
        return max(0, math.floor(self.pool_bytes / self.kv_bytes_per_sequence)) if self.kv_bytes_per_sequence else 0

    def holds(self, tokens: float) -> bool:
        """Whether the pool holds the KV cache of one request of `tokens` tokens on every stage."""
        return all(self.pool_by_stage[s] >= self.plan.kv_bytes(s, tokens) for s in range(self.plan.num_stages))


def formats(request: Request) -> Formats:
    """Activations in bf16 (fp16 on GPUs without bf16, fp32 for fp32 runs); GEMMs in the format
    `request.gemm_format` gives the task's dtype, reading weights narrower than it where they are stored
    narrower (int4 and mxfp4: 4-bit weights with their scales); the KV cache in task.kv_dtype, else the
    activations' format."""
    t, gpu = request.task, request.system.gpu
    act = DType.FP32 if t.dtype is DType.FP32 else gpu.half_dtype
    kv = t.kv_dtype or act
    gemm = gemm_format(t.dtype, gpu)
    stored = weight_bytes_per_param(t.dtype.value) or t.dtype.num_bytes
    narrower = stored if stored < gemm.num_bytes else None
    return Formats(act, gemm, narrower, stored, kv, t.dtype.value)


def check_request(request: Request) -> None:
    """Lengths and batch that the mode needs, within the model's context."""
    t, spec = request.task, request.spec
    for name, instead in (("global_batch", "batch"), ("seq_len", "prompt_len and output_len")):
        if getattr(t, name) is not None:
            raise ConfigError(f"task.{name} applies to training (and to a recommendation or vision model's "
                              f"inference); a serving run of {spec.name} takes {instead}")
    needs_batch = t.mode in (ServingMode.STATIC, ServingMode.CONCURRENCY) or (
        t.mode is ServingMode.DISAGGREGATED and t.request_rate is None)
    if needs_batch and t.batch is None:
        raise ConfigError(f"task.batch is required in mode {t.mode.value}: the requests in flight per replica; "
                          "allowed: a positive integer")
    if t.arrivals is None:
        for name in ("prompt_len", "output_len"):
            if getattr(t, name) is None:
                raise ConfigError(f"task.{name} is required for inference (tokens per request); allowed: a positive "
                                  "integer")
        if t.prompt_len + t.output_len > spec.max_seq_len:
            raise ConfigError(f"task.prompt_len + output_len = {t.prompt_len + t.output_len} exceeds max_seq_len="
                              f"{spec.max_seq_len} of {spec.name}; allowed: at most {spec.max_seq_len} tokens")
        if t.spread:
            longest = sum(Lengths(t.prompt_len, t.output_len, t.prompt_len_std, t.output_len_std).longest)
            if longest > spec.max_seq_len:
                raise ConfigError(f"the longest drawn request, task.prompt_len + output_len + {TRUNCATE_SIGMAS} x "
                                  f"(prompt_len_std + output_len_std) = {longest:,} tokens, exceeds max_seq_len="
                                  f"{spec.max_seq_len} of {spec.name}; allowed: lengths and deviations within it")


def tp_splits(spec, tp: int) -> bool:
    """Whether `tp` splits the model: it divides the heads and the dense FFNs (of the dense layers and the
    shared experts), and divides the KV heads or is a multiple of them (each KV head then replicated on
    tp / kv_heads ranks)."""
    for name, size in spec.parallel_constraints()["tp"]:
        if size % tp and not (name == "num_kv_heads" and tp % size == 0):
            return False
    return True


def serving_strategy(request: Request, requested: Strategy, tp: int, pp: int, field: str = "", ep: int = 1,
                     etp: int | None = None) -> Strategy:
    """A replica's strategy, checked: tp, pp, and dp replicas over the cluster (when `field` is empty; a
    disaggregated worker's replicas are its attention-data-parallel ones), the experts over ep x etp."""
    spec, n = request.spec, request.num_gpus
    where = f"strategy.{field}tp" if field else "strategy.tp"
    if not tp_splits(spec, tp):
        allowed = [d for d in range(1, spec.num_heads + 1) if tp_splits(spec, d)]
        sizes = ", ".join(f"{name}={size}" for name, size in spec.parallel_constraints()["tp"])
        raise StrategyError(f"{where}={tp} must divide {sizes} of {spec.name} (or be a multiple of its KV heads); "
                            f"allowed: {', '.join(map(str, allowed[:12]))}")
    if pp > spec.num_layers:
        raise StrategyError(f"strategy.{field}pp={pp} exceeds the {spec.num_layers} layers of {spec.name}; "
                            f"allowed: 1..{spec.num_layers}")
    ep, etp = expert_degrees(request, requested, tp, ep, etp, field)
    a = attention_dp(Strategy(tp=tp, ep=ep, etp=etp))
    if field:
        return Strategy(tp=tp, pp=pp, dp=a, ep=ep, etp=etp, **_exchange(requested))
    if n % (tp * pp):
        raise StrategyError(f"tp*pp={tp}*{pp}={tp * pp} does not divide num_gpus={n}; allowed: a tp*pp dividing {n}")
    dp = n // (tp * pp)
    if requested.dp is not None and requested.dp != dp:
        raise StrategyError(f"strategy.dp={requested.dp} but num_gpus={n} / (tp*pp={tp * pp}) = {dp} replicas; "
                            f"omit dp or set dp={dp}")
    if dp % a:
        raise StrategyError(f"strategy.ep*etp={ep}*{etp}={ep * etp} spans {a} replicas of tp={tp}, which do not "
                            f"divide the dp={dp} replicas on {n} GPUs; allowed ep*etp: "
                            f"{', '.join(str(tp * d) for d in range(1, dp + 1) if dp % d == 0)}")
    return Strategy(tp=tp, pp=pp, dp=dp, ep=ep, etp=etp, **_exchange(requested))


def _exchange(requested: Strategy) -> dict:
    """The options a replica keeps from the request: placement order and how experts exchange tokens."""
    return {"order": requested.order, "ep_overlap": requested.ep_overlap, "dispatch_fp8": requested.dispatch_fp8,
            "dispatcher": requested.dispatcher}


def expert_degrees(request: Request, requested: Strategy, tp: int, ep: int, etp: int | None,
                   field: str = "") -> tuple[int, int]:
    """(ep, etp) of a replica: etp defaults to tp / ep when ep divides tp, else 1; ep divides the experts,
    etp each expert's width, and ep x etp is tp or a multiple of it. A dense model takes ep = etp = 1."""
    spec = request.spec
    key = f"strategy.{field}ep"
    if not spec.has_experts:
        if ep > 1 or (etp or 1) > 1:
            name, value = (key, ep) if ep > 1 else ("strategy.etp", etp)
            raise StrategyError(f"{name}={value} places routed experts; {spec.name} has none; allowed: 1")
        if _exchanges(requested):
            raise StrategyError(f"strategy.ep_overlap, dispatch_fp8 and dispatcher apply to mixture-of-experts "
                                f"models; {spec.name} has no experts; allowed: ep_overlap=0, dispatch_fp8=0, "
                                "dispatcher=alltoall")
        return 1, 1
    experts_, width = spec.moe.num_experts, spec.moe.expert_ffn_hidden_size
    if experts_ % ep:
        raise StrategyError(f"{key}={ep} does not divide moe.num_experts={experts_} of {spec.name}; allowed: "
                            f"{', '.join(str(d) for d in range(1, experts_ + 1) if experts_ % d == 0)}")
    if etp is None:
        etp = tp // ep if tp % ep == 0 else 1
    if width % etp:
        raise StrategyError(f"strategy.etp={etp} does not divide moe.expert_ffn_hidden_size={width} of {spec.name}; "
                            f"allowed: {', '.join(str(d) for d in range(1, tp + 1) if width % d == 0 and tp % d == 0)}")
    if (ep * etp) % tp:
        allowed = f"etp={tp // ep}" if tp % ep == 0 else f"ep*etp a multiple of {tp}"
        raise StrategyError(f"{key}*etp={ep}*{etp}={ep * etp} is neither {field}tp={tp} (the experts split inside a "
                            f"replica) nor a multiple of it (attention data parallelism); allowed: {allowed}")
    a = ep * etp // tp
    if a == 1 and _exchanges(requested):
        raise StrategyError(f"strategy.ep_overlap, dispatch_fp8 and dispatcher act on the expert all-to-all, which "
                            f"a replica whose experts split inside it ({key}*etp = tp = {tp}) does not have; allowed: "
                            "ep_overlap=0, dispatch_fp8=0, dispatcher=alltoall, or ep*etp a multiple of tp beyond it "
                            "(attention data parallelism)")
    return ep, etp


def _exchanges(requested: Strategy) -> bool:
    """Whether the request sets an option of the expert all-to-all."""
    return requested.ep_overlap or requested.dispatch_fp8 or requested.dispatcher != "alltoall"


def check_keys(requested: Strategy, mode: ServingMode) -> None:
    """Training's strategy keys do not apply to serving; the disaggregated keys only to that mode."""
    allowed = SERVING_KEYS + (DISAGGREGATED_KEYS if mode is ServingMode.DISAGGREGATED else ())
    for key in sorted(requested.model_fields_set):
        if key not in allowed:
            raise StrategyError(f"strategy.{key} does not apply to inference in mode {mode.value}; allowed: "
                                f"{', '.join(allowed)}")


def replica(request: Request, strategy: Strategy, stack: ServingStack, fmt: Formats, step_tokens: int,
            step_sequences: int, context: float) -> Replica:
    """Plan and memory of one replica: weights, the workspace of a step of `step_tokens` tokens and
    `step_sequences` sampled sequences, reserve, and the KV pool for sequences of `context` tokens."""
    plan = build_serving_plan(request.workload, strategy, domain_size=request.system.scale_up_domain,
                              act_dtype=fmt.act, gemm_dtype=fmt.gemm, weight_width=fmt.weight_width,
                              weight_bytes_per_param=fmt.weight_bytes_per_param, kv_dtype=fmt.kv,
                              routing=request.task.routing)
    hbm = request.system.gpu.usable_memory_bytes
    weights = [plan.weights_bytes(s) for s in range(plan.num_stages)]
    workspace = [plan.workspace_bytes(s, step_tokens, step_sequences) for s in range(plan.num_stages)]
    per_sequence = [plan.kv_bytes(s, context) for s in range(plan.num_stages)]
    head = draft_head(request)
    if head is not None:  # the draft head on the last stage: its share of the weights and one more layer's cache
        weights[-1] += head.weight_share * sum(weights)
        per_sequence[-1] += sum(per_sequence) / head.layers
    drafter = draft_plan(request, strategy, fmt)
    if drafter is not None:  # the draft model on the replica's tp ranks: its weights and its own KV cache
        weights[-1] += drafter.weights_bytes(0)
        per_sequence[-1] += drafter.kv_bytes(0, context)
    # The training reserve (parallel.memory.Reserve): the context, a communicator per group of the replica
    # (tp, pp, ep) and the fragmentation of the step's workspace.
    reserve = runtime_reserve()
    held = reserve.context_bytes + float(reserve.communicators_bytes((strategy.tp, strategy.pp, strategy.ep)))
    reserved = [held + reserve.fragmentation * a for a in workspace]
    rests = [w + a + r for w, a, r in zip(weights, workspace, reserved, strict=True)]
    if stack.kv_pool_basis is KVPoolBasis.TOTAL:
        pools = [stack.kv_pool_fraction * hbm - rest for rest in rests]
    else:
        pools = [stack.kv_pool_fraction * (hbm - rest) for rest in rests]
    # The tightest stage: the one whose pool holds the fewest requests (the first on a tie).
    s = min(range(plan.num_stages), key=lambda s: pools[s] / per_sequence[s] if per_sequence[s] else math.inf)
    room = tuple(max(0.0, pool) for pool in pools)
    return Replica(strategy, plan, weights[s], workspace[s], reserved[s], room[s], per_sequence[s], room, drafter)


def draft_plan(request: Request, strategy: Strategy, fmt: Formats) -> ServingPlan | None:
    """The draft model's plan (speculative=draft) over the replica's tensor-parallel ranks, in the replica's
    formats; None without one. vLLM and SGLang run the draft at the target's tensor parallelism by default
    (vLLM SpeculativeConfig.draft_tensor_parallel_size, SGLang --speculative-draft-model-path)."""
    if request.draft_workload is None:
        return None
    name = request.draft.name
    if strategy.pp > 1:
        raise ConfigError(f"task.draft_model={name} runs beside the tensor-parallel ranks of the model it drafts for, "
                          f"which pp={strategy.pp} splits into stages; allowed: pp=1 with a draft model")
    if not tp_splits(request.draft, strategy.tp):
        raise ConfigError(f"task.draft_model={name} cannot be split over tp={strategy.tp} (its heads or FFN); "
                          "allowed: a tp that splits both models, or another draft model")
    return build_serving_plan(request.draft_workload, Strategy(tp=strategy.tp),
                              domain_size=request.system.scale_up_domain, act_dtype=fmt.act, gemm_dtype=fmt.gemm,
                              weight_width=fmt.weight_width, weight_bytes_per_param=fmt.weight_bytes_per_param,
                              kv_dtype=fmt.kv, routing=request.task.routing)


@dataclass(frozen=True)
class DraftHead:
    """A speculative draft head (EAGLE's, or the model's MTP modules): its weights over the model's, the model's
    layers (the head caches one more layer's keys and values), and a drafted token's time over a plain decode
    step's (`read_fraction`)."""

    weight_share: float
    layers: int
    read_fraction: float


def draft_head(request: Request) -> DraftHead | None:
    """The task's draft head; None without one (no speculative decoding, or n-gram drafts, looked up in the
    context on the host). Weights: mtp the model's multi-token-prediction modules, eagle one mean layer and its
    (2h x h) input projection. A draft pass reads a mean layer's active weights and the LM head (which MTP and
    EAGLE heads share); a decode step reads the active weights but the embedding table (a row of it), and is
    weight-read bound: their ratio is the pass's time over the step's."""
    from madmax.config.task import Speculative
    from madmax.workload.transformer import active_params, param_counts

    kind = request.task.speculative
    if kind not in (Speculative.EAGLE, Speculative.MTP):
        return None
    spec = request.spec
    if kind is Speculative.MTP and not spec.mtp_layers:
        raise ConfigError(f"task.speculative=mtp drafts with the model's multi-token-prediction modules; "
                          f"{spec.name} has none (mtp_layers=0); allowed: eagle or ngram")
    counts = param_counts(spec)
    main = sum(counts.values()) - counts.get("mtp", 0)
    layers = main - counts["embedding"] - counts["lm_head"] - counts.get("position", 0)
    head = counts["mtp"] if kind is Speculative.MTP else layers / spec.num_layers + 2 * spec.hidden_size**2
    read = active_params(spec, counts) - counts["embedding"] - counts.get("position", 0)
    layer = (read - counts["lm_head"]) / spec.num_layers
    return DraftHead(head / main, spec.num_layers, (layer + counts["lm_head"]) / read)


def engine_settings(request: Request) -> dict:
    """The Deployment fields the task sets beside its replica: prefix caching (the shared prefix and its hit
    share) and speculative decoding (tokens a step verifies and gains, the draft head's time)."""
    t = request.task
    out = {"prefix": t.prefix_len, "prefix_hit": t.prefix_hit}
    if t.speculative is not None:
        head = draft_head(request)
        out |= {"width": t.drafting[1] + 1, "tokens_per_step": t.tokens_per_step,
                "draft_fraction": head.read_fraction if head else 0.0}
    return out


def runtime_of(request: Request, stack: ServingStack) -> Runtime:
    network = network_model(request.system)
    return make_runtime(stack, request.system, network, request.calibration)
