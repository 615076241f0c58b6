"""One step of RL post-training (GRPO, PPO), composed of the simulations madmax already makes (`config.rl`).

    generation   the rollout pool serves prompts x samples requests, all given at once (as verl and NeMo-RL hand
                 a step's prompts to vLLM): `simulate --mode rate` with every request arriving at t = 0, response
                 lengths drawn (a lognormal law of the mean and spread, cut at the longest allowed); the phase lasts
                 until the last response ends, so the longest sets it
    scoring      forward passes over the prompt + response of every sample on the training pool, logits of every
                 token (`api.forward_pass`): the policy's own log-probabilities (the ratio's old policy), the
                 frozen reference's (KL), the critic's values (PPO), a reward model's scores; a rule or verifier
                 reward costs no GPU time
    training     `mini_batches` optimizer steps of the policy (and the critic) over the samples: full fine-tuning
                 (`simulate --task finetune`) at the mean sequence length
    weight_sync  the new policy into the rollout engines: colocated, an all-gather of the weights over the pool
                 (the hybrid engine's reshard from the training layout into the engines' tp); disaggregated, each
                 rollout GPU receiving its tp share over the fabric between the pools

Step time: colocated and disaggregated synchronous, the four phases one after another; disaggregated
asynchronous, max(generation, scoring + training) + weight_sync (step n + 1 generates while step n trains, on
weights one step old). A colocated rollout engine's KV cache lives in what the training state (weights,
gradients, optimizer) leaves of each GPU, as verl's hybrid engine sets vLLM's gpu_memory_utilization.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from madmax.collective import Collective, Span
from madmax.config.checks import positive_number, scratch_root
from madmax.config.loaders import load_model, load_system
from madmax.config.rl import RLLayout, RLSetup, load_rl
from madmax.errors import ConfigError
from madmax.results.rl import RLResult

SEED = 0  # the response lengths' draws: every layout of a setup serves the same responses


def simulate_rl(model: Any, system: Any, num_gpus: int | None = None, rl: Any = None, *, prompt_len: int,
                response_len: int, dtype: str | None = None, strategy: str | None = None, stack: Any = None,
                calibration: str | Path | None = None) -> RLResult:
    """One RL step of `model` on `system` (see the module docstring): `rl` an RLSetup, a mapping, 'key=value,...'
    text or a file (prompts, samples, layout, rollout_gpus, rollout_tp, ...); `prompt_len` and `response_len`
    (the mean) tokens per sample; `strategy` and `stack` the training step's (its scoring passes use its tp, pp,
    cp and expert degrees). Raises `MadmaxError` on bad input."""
    from madmax import api
    from madmax.hardware.collectives import network_model

    setup = load_rl(rl)
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len < 1:
        raise ConfigError(f"prompt_len={prompt_len!r} is not a positive integer; allowed: the prompt's tokens, "
                          "1 or more")
    response_len = positive_number(response_len, "response_len", "tokens")
    spec = load_model(model)
    if not getattr(spec, "vocab_size", None) or spec.family != "decoder":
        raise ConfigError(f"task=rl post-trains a language model; {spec.name} is a {spec.family} model")
    cluster = load_system(system, num_gpus)
    n = cluster.cluster_gpus
    rollout_gpus, train_gpus = split_pools(setup, n, cluster.gpus_per_node)
    longest = _longest(setup, spec, prompt_len)
    if prompt_len + min(longest, math.ceil(response_len)) > spec.max_seq_len:
        raise ConfigError(f"prompt_len + response_len = {prompt_len + response_len:g} exceeds max_seq_len="
                          f"{spec.max_seq_len} of {spec.name}")
    if rollout_gpus % setup.rollout_tp:
        raise ConfigError(f"rl.rollout_tp={setup.rollout_tp} does not divide the rollout pool's {rollout_gpus} GPUs; "
                          "allowed: a divisor")
    reward = None if setup.reward_model is None else load_model(setup.reward_model)
    if reward is not None and reward.family != "decoder":  # another tokenizer is fine: the text is re-tokenized
        raise ConfigError(f"rl.reward_model={reward.name} is a {reward.family} model; allowed: a language model")
    responses, seq_len = step_shape(setup, spec, prompt_len, response_len)
    sequences = setup.prompts * setup.samples
    mean = float(responses.mean())
    notes: list[str] = []

    # training: mini_batches optimizer steps of the policy, full fine-tuning at the mean sequence length
    train_system = load_system(cluster, train_gpus)
    step = api.simulate(spec, train_system, train_gpus, task="finetune", global_batch=sequences // setup.mini_batches,
                        seq_len=seq_len, dtype=dtype, strategy=strategy, stack=stack, calibration=calibration)
    training_s = setup.mini_batches * step.iteration_time_s * (2 if setup.critic else 1)
    train_dtype = step.dtype

    # scoring: forward passes over every sample on the training pool
    def forward(scorer: Any) -> float:
        r = api.forward_pass(scorer, train_system, train_gpus, batch=sequences, seq_len=seq_len, dtype=train_dtype,
                             strategy=step.strategy, stack=stack, calibration=calibration)
        return r.iteration_time_s

    policy_pass = forward(spec)
    passes = {"policy log-probabilities": policy_pass}
    if setup.reference:
        passes["reference log-probabilities"] = policy_pass  # the same weights' shape, frozen
    if setup.critic:
        passes["critic values"] = policy_pass  # a value model of the policy's size (its scalar head aside)
    if reward is not None:
        passes[f"reward model {reward.name}"] = forward(reward)
    scoring_s = sum(passes.values())

    # generation: every response of the step served by the rollout pool, all requests given at once
    rollout_system = load_system(cluster, rollout_gpus)
    engine = "frontend_s=0"  # in-process engines (vLLM's LLM, SGLang's Engine): no HTTP front end
    if setup.layout is RLLayout.COLOCATED:
        left = _left_for_rollout(step, cluster)
        engine += f",kv_pool_fraction={left:.4f}"
        notes.append(f"colocated: the rollout engine keeps what the training state leaves of each GPU, "
                     f"{left:.0%} of its memory (verl's hybrid engine sets vLLM's gpu_memory_utilization so)")
    generated = _generate(spec, rollout_system, rollout_gpus, setup, prompt_len, responses, engine,
                          setup.rollout_dtype or train_dtype, calibration)
    generation_s = sequences / generated.requests_per_s

    # the new weights into the rollout engines
    weight_bytes = spec_params(spec) * 2  # bf16 copies of the policy
    network = network_model(cluster)
    domain = cluster.scale_up_domain
    if setup.layout is RLLayout.COLOCATED:
        span = Span(min(n, domain), max(1, n // domain))
        sync_s = network.collective_s(Collective.ALL_GATHER, weight_bytes, span)
    else:
        span = Span(2, 1) if n <= domain else Span(1, 2)
        sync_s = network.collective_s(Collective.SEND_RECV, weight_bytes / setup.rollout_tp, span)

    phases = {"generation": generation_s, "scoring": scoring_s, "training": training_s, "weight_sync": sync_s}
    if setup.layout is RLLayout.DISAGGREGATED and setup.asynchronous:
        step_s = max(generation_s, scoring_s + training_s) + sync_s
        busy = {"rollout": generation_s + sync_s, "train": scoring_s + training_s + sync_s}
        notes.append("asynchronous: step n + 1 generates while step n scores and trains, on weights one step old")
    else:
        step_s = sum(phases.values())
        busy = ({"all": step_s} if setup.layout is RLLayout.COLOCATED
                else {"rollout": generation_s + sync_s, "train": scoring_s + training_s + sync_s})
    gpus = {"all": n} if setup.layout is RLLayout.COLOCATED else {"rollout": rollout_gpus, "train": train_gpus}
    pools = {name: {"gpus": gpus[name], "busy_fraction": min(1.0, busy[name] / step_s)} for name in gpus}
    fits = bool(step.fits and generated.fits)
    reason = step.fits_reason if not step.fits else (None if generated.fits else
                                                     f"rollout: {generated.fits_reason}")
    notes += [f"responses: {sequences:,} of {prompt_len:,}-token prompts, drawn with mean {mean:,.0f} tokens"
              + (f" (lognormal: asked {response_len:g}, spread {setup.response_len_std:g}, cut at {longest:,})"
                 if setup.response_len_std else "") + f"; the longest {int(responses.max()):,}",
              f"training: {setup.mini_batches} optimizer step(s) of {sequences // setup.mini_batches:,} samples of "
              f"{seq_len:,} tokens (the mean; responses are packed, not padded)"
              + ("; the critic trains alike" if setup.critic else ""),
              "weight sync: "
              + ("an all-gather of the bf16 policy over the pool" if setup.layout is RLLayout.COLOCATED
                 else f"each rollout GPU receives its 1/{setup.rollout_tp} of the bf16 policy between the pools")]
    return RLResult(model=spec.name, system=cluster.name, num_gpus=n, layout=setup.layout.value,
                    asynchronous=setup.asynchronous, prompts=setup.prompts, samples=setup.samples,
                    prompt_len=prompt_len, response_len=mean, longest_response=int(responses.max()),
                    step_time_s=step_s, phases_s=phases, passes_s=passes, pools=pools,
                    rollout_strategy=generated.strategy, train_strategy=step.strategy,
                    rollout_stack=generated.stack, train_stack=_stack_name(stack), fits=fits, fits_reason=reason,
                    generation={"requests_per_s": generated.requests_per_s,
                                "output_tokens_per_s": generated.output_tokens_per_s,
                                "ttft_s": generated.ttft_s, "tpot_s": generated.tpot_s,
                                "max_batch_by_memory": generated.max_batch_by_memory},
                    training={"iteration_time_s": step.iteration_time_s, "mfu": step.mfu,
                              "peak_memory_bytes": step.peak_memory_bytes},
                    assumptions=notes)


def step_shape(setup: RLSetup, spec: Any, prompt_len: int, response_len: float) -> tuple[np.ndarray, int]:
    """The step's response lengths (drawn, seeded) and the sequence length its scoring and training run at: the
    prompt plus the mean response (responses are packed, not padded)."""
    responses = _responses(setup, response_len, _longest(setup, spec, prompt_len))
    return responses, max(1, round(prompt_len + float(responses.mean())))


def _longest(setup: RLSetup, spec: Any, prompt_len: int) -> int:
    """The longest response allowed: max_response_len, else what the model's context leaves after the prompt."""
    return setup.max_response_len or max(1, spec.max_seq_len - prompt_len)


def spec_params(spec: Any) -> float:
    from madmax.workload import param_counts

    return float(sum(param_counts(spec).values()))


def _stack_name(stack: Any) -> str:
    from madmax.config.training_stack import load_training_stack

    return load_training_stack(stack).name


def split_pools(setup: RLSetup, n: int, node: int) -> tuple[int, int]:
    """(rollout GPUs, training GPUs): both the whole cluster when colocated, else the split asked for, each a
    cluster simulate takes (at most one node, or whole nodes)."""
    if setup.layout is RLLayout.COLOCATED:
        return n, n
    r = setup.rollout_gpus or 0
    if r >= n:
        raise ConfigError(f"rl.rollout_gpus={r} leaves no GPU to train of the {n}; allowed: 1 to {n - 1}")
    for name, count in (("rollout_gpus", r), ("the training pool", n - r)):
        if count > node and count % node:
            raise ConfigError(f"rl.rollout_gpus={r}: {name} of {count} GPUs is not at most one node or whole nodes of "
                              f"{node}; allowed: a split into whole nodes (or within one)")
    return r, n - r


def _responses(setup: RLSetup, mean: float, longest: int) -> np.ndarray:
    """The step's response lengths: `mean` each, or a lognormal law of that mean and spread (response lengths are
    positive with a long right tail) cut at `longest`, as engines stop a response at max_tokens; seeded."""
    count = setup.prompts * setup.samples
    if not setup.response_len_std:
        return np.full(count, min(longest, max(1, round(mean))), dtype=np.int64)
    sigma2 = math.log1p((setup.response_len_std / mean) ** 2)
    draw = np.random.default_rng(SEED).lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), count)
    return np.clip(np.round(draw), 1, longest).astype(np.int64)


def _left_for_rollout(step: Any, cluster: Any) -> float:
    """The share of a GPU's memory the training state (weights, gradients, optimizer) leaves to a colocated
    rollout engine."""
    memory = step.memory
    state = memory.get("weights", 0.0) + memory.get("gradients", 0.0) + memory.get("optimizer", 0.0)
    total = cluster.gpu.usable_memory_bytes
    left = (total - state) / total
    if left <= 0.05:
        raise ConfigError(f"colocated: the training state takes {state / 2**30:.1f} GiB of each GPU's "
                          f"{total / 2**30:.1f} GiB, leaving no room for the rollout engine; allowed: more GPUs, a "
                          "ZeRO stage that shards the state, or layout=disaggregated")
    return min(left, 0.9)


def _generate(spec: Any, system: Any, gpus: int, setup: RLSetup, prompt_len: int, responses: np.ndarray,
              engine: str, dtype: str, calibration: Any) -> Any:
    """The rollout: every response requested at t = 0 (an arrivals file), served by gpus / rollout_tp engines."""
    from madmax import api

    with tempfile.TemporaryDirectory(prefix="madmax-rl-", dir=scratch_root()) as scratch:
        path = Path(scratch) / "arrivals.csv"
        path.write_text("arrival_s,prompt_len,output_len\n"
                        + "".join(f"0,{prompt_len},{int(o)}\n" for o in responses), encoding="utf-8")
        return api.simulate(spec, system, gpus, task="inference", mode="rate", arrivals=str(path), dtype=dtype,
                            strategy=f"tp={setup.rollout_tp},dp={gpus // setup.rollout_tp}",
                            stack=setup.rollout_stack, engine=engine, calibration=calibration)


__all__ = ["RLSetup", "simulate_rl"]
