"""What holds a served deployment's requests back, in words (`ServingResult.limits`).

A request waits for one of the limits of its engine: the token budget of a step (with no room for a prompt
beside the running decodes, a prompt that does not chunk waits until they finish; a budget filled by the
prompts it took makes the next ones wait a step), the cap on running requests, or the KV pool (a request
starts when its cache fits). The engine loop counts the step time during which a waiting request was held by each
(`serve.loop.Requests.blocked_s`). A result names a limit when its queue shows in what the user reads:

    TTFT > the time to prefill every request in flight (the batch's prefill) + the front end's time, or
    output tokens/s per replica < one request served alone: output / (prefill + (output - 1) x decode step),

or when a limit other than a full budget holds waiting requests for at least `NAMED_SHARE` of the engine's
step time.
"""

from __future__ import annotations

from madmax.config.units import GIB
from madmax.serve import modes

# Share of the engines' step time a limit must hold waiting requests for to be named on its own.
NAMED_SHARE = 0.1


def limits(dep: modes.Deployment, outcome: modes.Outcome, batch: int, prompt: int, output: int,
           prefill_all_s: float) -> list[str]:
    """Sentences naming the limits that queue the requests, the largest first (empty when none shows)."""
    stack = dep.runtime.stack
    ttft = outcome.mean("ttft_s")
    alone_s = dep.step_s(modes.prefill_step(1, prompt)) + (output - 1) * modes.mean_decode_s(dep, 1, prompt, output)
    alone = output / alone_s if alone_s > 0 else 0.0
    per_replica = outcome.output_tokens_per_s / dep.replicas
    symptoms = []
    if batch and ttft > prefill_all_s + stack.frontend_s:
        symptoms.append(f"TTFT {ttft * 1e3:,.1f} ms exceeds the {prefill_all_s * 1e3:,.1f} ms that prefill every "
                        f"request in flight")
    if per_replica < alone * (1 - 1e-9):
        symptoms.append(f"{per_replica:,.0f} output tokens/s per replica is below the {alone:,.0f} of one request "
                        "served alone")
    held = sorted(outcome.blocked.items(), key=lambda kv: -kv[1])
    # A budget filled by the prompts it took is the engine at work: named only when it shows.
    named = [(reason, share) for reason, share in held
             if (share >= NAMED_SHARE and reason != "steps") or (symptoms and share > 0)]
    out = [f"{_sentence(dep, reason, prompt, output, batch)} ({share:.0%} of the steps held a waiting request)"
           for reason, share in named]
    if symptoms and not named:
        out.append("requests wait for the steps ahead of them: the prompts in flight take longer than one batch's "
                   "prefill because decodes share the steps")
    return [f"{'; '.join(symptoms)}: {out[0]}", *out[1:]] if symptoms else out


def _sentence(dep: modes.Deployment, reason: str, prompt: int, output: int, batch: int) -> str:
    """The limit `reason` (budget, batch, kv) of the deployment's engine, with its numbers and the way out."""
    stack = dep.runtime.stack
    if reason == "budget" and not stack.chunked_prefill:
        raised = (batch or stack.max_batch) + prompt + 1500
        return (f"the token budget max_num_tokens={stack.max_num_tokens:,} leaves no room for a {prompt:,}-token "
                f"prompt beside the running decodes and stack {stack.name} does not chunk prompts, so a prompt "
                f"waits until the requests ahead of it finish; raise it (--engine max_num_tokens={raised:,}) or "
                "chunk prompts (--engine chunked_prefill=1)")
    if reason == "budget":
        return (f"the token budget max_num_tokens={stack.max_num_tokens:,} is taken by the running decodes, "
                "leaving no prompt tokens for a step")
    if reason == "steps":
        return (f"the token budget max_num_tokens={stack.max_num_tokens:,} holds {stack.prompts_per_step(prompt)} "
                f"prompt(s) of {prompt:,} tokens a step, less the running decodes; later prompts wait for the next")
    if reason == "batch":
        return (f"the engine runs at most max_batch={max(1, stack.max_batch // dep.pp):,} requests at once; the "
                "others wait")
    rep = dep.replica
    return (f"the KV pool ({rep.pool_bytes / GIB:,.1f} GiB per GPU) holds {rep.max_sequences:,} requests of "
            f"{prompt + output:,} tokens; the others wait for a finished request's cache")
