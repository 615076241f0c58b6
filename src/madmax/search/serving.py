"""The serving search: the replica layout, batch and number formats that serve the most output tokens/s
per GPU within time-to-first-token and time-per-output-token limits.

A candidate is tp and pp of a replica (dp = GPUs / (tp pp) replicas), the weights' format (bf16 or fp16,
fp8, fp4 where the GPU has them; int4 weight-only when asked), the KV cache's format (16 bits, fp8) and
the batch per replica (1, 2, 4, ... up to what the KV pool holds). A mixture-of-experts model adds where its
experts go (`expert_layouts`): split by width over the replica's tp ranks (ep = 1, etp = tp), one expert
group per rank (ep = tp), or over a x tp GPUs with attention data parallelism (ep = a tp, a dividing dp),
each ep dividing the experts. Rules, each counted under the first it breaks: `tp` divides the heads and the
FFN and divides or is a multiple of the KV heads, and stays in one scale-up domain; `pp` <= layers;
`memory`: the weights, a step's activations and the reserve leave the pool room for one request. Batches
are tried from the smallest; the first over a limit ends the layout's batches, since a larger batch only
lengthens the prefill and the decode steps.

Every candidate that fits is scored by the serving builder's fast estimate (`program.serving.step_time`,
its declared capability) in static batching: TTFT = the batch's prefill (its micro-batches through the
pipeline: sum of the stages + (pp - 1) x the slowest), TPOT = the mean decode step, output tokens/s =
dp x batch x output / (TTFT + (output - 1) TPOT). Candidates over a limit are dropped. The best `exact`
are simulated with `madmax.simulate` in the requested mode, and ranked by the simulated numbers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from madmax.config.base import DTYPE_ALIASES, DType
from madmax.config.strategy import Strategy
from madmax.config.task import ServingMode, TaskKind
from madmax.errors import ConfigError, MadmaxError
from madmax.request import gemm_format
from madmax.results.serving import ServingResult

RULES = ("tp_divides_model", "tp_within_domain", "pp_layers", "memory")
WEIGHT_FORMATS = ("bf16", "fp16", "fp8", "fp4", "int8", "int4", "mxfp4")
MAX_BATCH = 4096


@dataclass(frozen=True)
class Candidate:
    """One serving layout and its estimate."""

    tp: int
    pp: int
    dp: int
    dtype: str
    kv_dtype: str
    batch: int
    ttft_s: float
    tpot_s: float
    output_tokens_per_s_per_gpu: float
    max_batch_by_memory: int
    ep: int = 1
    etp: int = 1

    @property
    def strategy(self) -> str:
        experts = f",ep={self.ep},etp={self.etp}" if self.ep * self.etp > 1 else ""
        return f"tp={self.tp},pp={self.pp},dp={self.dp}{experts}"


@dataclass
class ServingSearch:
    """What a serving search found: every candidate that fits and meets the limits, by estimate, and the
    simulated results of the best."""

    model: str
    system: str
    num_gpus: int
    prompt_len: int
    output_len: int
    mode: str
    stack: str
    limits: dict[str, float | None]
    candidates: list[Candidate]
    exact: list[tuple[Candidate, ServingResult]]
    enumerated: int
    rejected: dict[str, int]
    timings_s: dict[str, float] = field(default_factory=dict)

    def top(self, k: int) -> list[tuple[Candidate, ServingResult]]:
        """The best k simulated candidates that fit and meet the limits."""
        return [(c, r) for c, r in self.exact if r.fits and _meets(r.ttft_s, r.tpot_s, self.limits)][:k]


def _meets(ttft: float, tpot: float, limits: dict[str, float | None]) -> bool:
    return ((limits["max_ttft_s"] is None or ttft <= limits["max_ttft_s"])
            and (limits["max_tpot_s"] is None or tpot <= limits["max_tpot_s"]))


def find_serving(model: Any, system: Any, num_gpus: int | None = None, *, prompt_len: int | None = None,
                 output_len: int | None = None, mode: str = "static", stack: Any = None,
                 dtypes: list[str] | None = None, kv_dtypes: list[str] | None = None, max_ttft: float | None = None,
                 max_tpot: float | None = None, max_tp: int | None = None, max_pp: int | None = None,
                 max_batch: int | None = None, top: int = 10, exact: int | None = None,
                 calibration: Any = None) -> ServingSearch:
    """Search every serving layout (see the module docstring); `exact` best by estimate are simulated
    (default max(10, 2 top)). Raises `MadmaxError` on bad input."""
    from madmax.config.stack import load_stack
    from madmax.request import resolve_request

    start = time.perf_counter()
    stack_spec = load_stack(stack)
    base = resolve_request(model, system, num_gpus, "inference", calibration=calibration, batch=1,
                           prompt_len=prompt_len, output_len=output_len, mode=mode, max_ttft_s=max_ttft,
                           max_tpot_s=max_tpot)
    if not base.workload.generates_tokens:  # a recommendation model or a ViT: one forward pass per batch
        raise ConfigError(f"search --task inference searches the serving layouts of models that generate tokens; "
                          f"{base.spec.name} runs one forward pass per batch; allowed: simulate --task inference "
                          "--batch B with a --strategy, or search its training (--task pretrain)")
    t = base.task
    if t.prompt_len is None or t.output_len is None:
        raise ConfigError("search --task inference needs prompt_len and output_len (tokens per request); "
                          "allowed: positive integers")
    if t.mode not in (ServingMode.STATIC, ServingMode.CONCURRENCY, ServingMode.SATURATION):
        raise ConfigError(f"task.mode={t.mode.value} is not searched; allowed: static, concurrency, saturation")
    if top < 1:
        raise ConfigError(f"top={top} must be a positive number of layouts to report")
    exact = max(10, 2 * top) if exact is None else exact
    if exact < top:
        raise ConfigError(f"exact={exact} must be at least top={top} (the reported layouts are simulated)")
    for name, value in (("max_tp", max_tp), ("max_pp", max_pp), ("max_batch", max_batch)):
        if value is not None and value < 1:
            raise ConfigError(f"{name}={value} must be a positive integer")
    formats = formats_to_try(base, dtypes, kv_dtypes)
    limits = {"max_ttft_s": max_ttft, "max_tpot_s": max_tpot}
    candidates, enumerated, rejected = _evaluate(base, stack_spec, formats, limits, max_tp, max_pp,
                                                 min(max_batch or MAX_BATCH, MAX_BATCH))
    timings = {"estimate": time.perf_counter() - start}
    candidates.sort(key=lambda c: -c.output_tokens_per_s_per_gpu)
    clock = time.perf_counter()
    simulated = _simulate(base, stack_spec, candidates[:exact], calibration)
    simulated.sort(key=lambda cr: (not (cr[1].fits and _meets(cr[1].ttft_s, cr[1].tpot_s, limits)),
                                   -cr[1].output_tokens_per_s_per_gpu))
    timings["simulate"] = time.perf_counter() - clock
    return ServingSearch(model=base.spec.name, system=base.system.name, num_gpus=base.num_gpus,
                         prompt_len=t.prompt_len, output_len=t.output_len, mode=t.mode.value, stack=stack_spec.name,
                         limits=limits, candidates=candidates, exact=simulated, enumerated=enumerated,
                         rejected=rejected, timings_s=timings)


def formats_to_try(base, dtypes: list[str] | None, kv_dtypes: list[str] | None) -> list[tuple[str, str]]:
    """(weights, KV cache) formats to try: by default every weight format the GPU has (bf16, else fp16;
    fp8; fp4), each with a 16-bit cache and, where the GPU has fp8, an fp8 cache; `dtypes` may also name the
    quantized formats (int8 where the GPU has int8 tensor cores, int4 and its aliases awq/gptq, mxfp4)."""
    gpu = base.system.gpu
    peaks = {d.value for d in gpu.flops_per_s}
    act = gpu.half_dtype.value
    if dtypes is None:
        chosen = [act] + [d for d in ("fp8", "fp4") if d in peaks]
    else:
        chosen = [DTYPE_ALIASES.get(text, text) for text in (str(d).strip().lower() for d in dtypes)]
        allowed = sorted({act, *(d for d in WEIGHT_FORMATS if gemm_format(DType(d), gpu).value in peaks)})
        bad = [d for d in chosen if d not in allowed]
        if bad or not chosen:
            raise ConfigError(f"dtypes={list(dtypes)} must list formats gpu {gpu.name} has; allowed: "
                              f"{', '.join(allowed)}")
    if kv_dtypes is None:
        kvs = [act] + (["fp8"] if "fp8" in peaks else [])
    else:
        kvs = [str(d).strip().lower() for d in kv_dtypes]
        if not kvs or any(k not in (act, "fp8") for k in kvs):
            raise ConfigError(f"kv_dtypes={list(kv_dtypes)} must list KV-cache formats; allowed: {act}, fp8")
    return [(d, k) for d in dict.fromkeys(chosen) for k in dict.fromkeys(kvs)]


def _layouts(base, max_tp: int | None, max_pp: int | None,
             rejected: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """(tp, pp, ep, etp) whose tp * pp divides the GPU count (`expert_layouts` for the experts), counting
    the rule each rejected (tp, pp) pair breaks."""
    from madmax.serve.deployment import tp_splits

    spec, n, domain = base.spec, base.num_gpus, base.system.scale_up_domain
    out = []
    for tp in (d for d in range(1, n + 1) if n % d == 0 and d <= (max_tp or n)):
        for pp in (d for d in range(1, n // tp + 1) if (n // tp) % d == 0 and d <= (max_pp or n)):
            if not tp_splits(spec, tp):
                rejected["tp_divides_model"] += 1
            elif tp > domain:
                rejected["tp_within_domain"] += 1
            elif pp > spec.num_layers:
                rejected["pp_layers"] += 1
            else:
                out += [(tp, pp, ep, etp) for ep, etp in expert_layouts(spec, tp, n // (tp * pp))]
    return out


def expert_layouts(spec, tp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) of the experts of a replica of tp ranks among dp replicas: (1, 1) for a dense model; else
    the experts split by width over tp (1, tp), one group per rank (tp, 1), and attention data parallelism
    over a replicas (a tp, 1) for each a > 1 dividing dp; those whose ep divides the experts and whose etp
    divides an expert's width."""
    if not spec.has_experts:
        return [(1, 1)]
    experts, width = spec.moe.num_experts, spec.moe.expert_ffn_hidden_size
    layouts = [(1, tp), (tp, 1)] + [(a * tp, 1) for a in range(2, dp + 1) if dp % a == 0]
    return [(ep, etp) for ep, etp in dict.fromkeys(layouts) if experts % ep == 0 and width % etp == 0]


def _evaluate(base, stack, formats, limits, max_tp, max_pp, max_batch) -> tuple[list[Candidate], int, dict]:
    """Every candidate's estimate (the fast closed form in static batching)."""
    from madmax.request import resolve_request
    from madmax.serve import modes
    from madmax.serve.deployment import formats as formats_of
    from madmax.serve.deployment import replica, runtime_of

    rejected = dict.fromkeys(RULES, 0)
    layouts = _layouts(base, max_tp, max_pp, rejected)
    # A layout and formats make one replica: each (tp, pp) rule rejection counts once per format pair.
    enumerated = (sum(rejected.values()) + len(layouts)) * len(formats)
    rejected = {k: v * len(formats) for k, v in rejected.items()}
    runtime = runtime_of(base, stack)
    t = base.task
    p, o = t.prompt_len, t.output_len
    out: list[Candidate] = []
    for dtype, kv in formats:
        request = resolve_request(base.spec, base.system, base.num_gpus, "inference", calibration=base.calibration,
                                  batch=1, prompt_len=p, output_len=o, dtype=dtype, kv_dtype=kv)
        fmt = formats_of(request)
        for tp, pp, ep, etp in layouts:
            strategy = Strategy(tp=tp, pp=pp, dp=base.num_gpus // (tp * pp), ep=ep, etp=etp)
            fit = stack.prompts_per_step(p)
            rep = replica(request, strategy, stack, fmt, fit * p, fit, p + o)
            if rep.max_sequences < 1:
                rejected["memory"] += 1
                continue
            dep = modes.Deployment(rep, runtime, strategy.dp, p + o)
            top_batch = min(rep.max_sequences, max_batch)
            for batch in modes.batch_ladder(top_batch):
                ttft, tpot = static_estimate(dep, batch, p, o)
                if not _meets(ttft, tpot, limits):
                    break  # a larger batch only lengthens the prefill and the decode step
                rate = strategy.dp * batch * o / (ttft + (o - 1) * tpot) / base.num_gpus
                out.append(Candidate(tp, pp, strategy.dp, dtype, kv, batch, ttft, tpot, rate, rep.max_sequences,
                                     ep, etp))
    return out, enumerated, rejected


def static_estimate(dep, batch: int, prompt: int, output: int, mid_decode: bool = False) -> tuple[float, float]:
    """TTFT and TPOT of a static batch by the fast closed form: the prefill of each micro-batch in steps
    within the token budget, drained through the pipeline, and the mean decode step (`mid_decode`: the step at
    the mean context, prompt + output / 2, one evaluation; exact where a step's time is linear in the context)."""
    from madmax.parallel.serving import Step
    from madmax.program.serving import stage_times
    from madmax.serve import modes

    per_engine = math.ceil(batch / dep.pp)
    fit = dep.runtime.stack.prompts_per_step(prompt)
    sizes = modes.prefill_rounds(per_engine, fit)
    ttft = (len(sizes) - 1) * dep.step_s(dep.prefill_step(fit, prompt)) if len(sizes) > 1 else 0.0
    last: Step = dep.prefill_step(sizes[-1], prompt)
    if dep.pp == 1:
        ttft += dep.step_s(last)
    else:
        stages = [stage_times(dep.replica.plan, dep.runtime, s, last).total_s for s in range(dep.pp)]
        ttft += sum(stages) + (dep.pp - 1) * max(stages)
    if mid_decode:
        return ttft, (dep.step_s(dep.decode_step(per_engine, prompt + output / 2)) / dep.tokens_per_step
                      if output > 1 else 0.0)
    return ttft, modes.mean_decode_s(dep, per_engine, prompt, output)


def _simulate(base, stack, candidates: list[Candidate], calibration) -> list[tuple[Candidate, ServingResult]]:
    from madmax.api import simulate

    t = base.task
    out = []
    for c in candidates:
        try:
            r = simulate(base.spec, base.system, base.num_gpus, task="inference", batch=c.batch,
                         prompt_len=t.prompt_len, output_len=t.output_len, mode=t.mode.value, dtype=c.dtype,
                         kv_dtype=c.kv_dtype, strategy=c.strategy, stack=stack,
                         max_ttft=t.max_ttft_s, max_tpot=t.max_tpot_s, calibration=calibration)
        except MadmaxError as exc:  # a candidate the estimate kept but simulate refuses is a search bug
            raise AssertionError(f"the serving search kept a layout simulate refuses: {exc}") from exc
        out.append((c, r))
    return out


def summary(search: ServingSearch, top: int) -> dict[str, Any]:
    """The search's counts and its top layouts as simulate results, for --json."""
    return {"model": search.model, "system": search.system, "num_gpus": search.num_gpus,
            "task": TaskKind.INFERENCE.value,
            "mode": search.mode, "stack": search.stack, "prompt_len": search.prompt_len,
            "output_len": search.output_len, "limits": search.limits, "enumerated": search.enumerated,
            "rejected": search.rejected, "evaluated": len(search.candidates), "simulated": len(search.exact),
            "timings_s": search.timings_s,
            "results": [r.to_dict() for _, r in search.top(top)]}


__all__ = ["Candidate", "ServingSearch", "find_serving", "summary"]
