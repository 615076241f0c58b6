"""What holds a served deployment's requests back, in words (`ServingResult.limits`).

A request waits for one of the limits of its engine: the token budget of a step (with no room for a prompt
beside the running decodes, a prompt that does not chunk waits until they finish; a budget filled by the
prompts it took makes the next ones wait a step), the cap on running requests, or the KV pool (a request
starts when its cache fits). The engine loop counts the step time during which a waiting request was held by each
(`serve.loop.Requests.blocked_s`). A result names a limit when its queue shows in what the user reads:

    TTFT > 1.05 x (the time to prefill every request in flight + the front end's time), or, for
    closed-loop clients, output tokens/s per replica < one request served alone:
    output / (front end + prefill + (output - 1) x decode step),

or when a limit other than a full budget holds waiting requests for at least `NAMED_SHARE` of the engine's
step time; and arrivals at a rate the deployment does not keep up with.
"""

from __future__ import annotations

from madmax.config.stack import sized_budget
from madmax.config.units import GIB
from madmax.serve import modes

# Share of the engines' step time a limit must hold waiting requests for to be named on its own.
NAMED_SHARE = 0.1
# How far TTFT must exceed the prefill of every request in flight to be a queue (not where a request landed
# in a step).
QUEUE_MARGIN = 0.05


def limits(dep: modes.Deployment, outcome: modes.Outcome, batch: int, prompt: int, output: int,
           prefill_all_s: float, closed: bool, arrival_rate: float | None = None) -> list[str]:
    """Sentences naming the limits that queue the requests, the largest first (empty when none shows).
    `closed`: clients that send again as soon as they are answered (concurrency, saturation), whose
    throughput can be held against one request served alone; arrivals at a rate set their own, and a
    deployment busy all the time that serves fewer requests per second than arrive (`arrival_rate`, the rate of
    the simulated arrivals: a Poisson sample's own, a trace's) is overloaded."""
    stack = dep.runtime.stack
    ttft = outcome.mean("ttft_s")
    overload = []
    if (arrival_rate and outcome.busy_fraction > 1 - QUEUE_MARGIN
            and outcome.requests_per_s < arrival_rate * (1 - QUEUE_MARGIN)):
        overload.append(f"requests arrive at {arrival_rate:,.2f}/s and the deployment serves "
                        f"{outcome.requests_per_s:,.2f}/s: the queue, and TTFT, grow with every request")
    symptoms = []
    if batch and ttft > (prefill_all_s + stack.frontend_s) * (1 + QUEUE_MARGIN):
        symptoms.append(f"TTFT {ttft * 1e3:,.1f} ms exceeds the {prefill_all_s * 1e3:,.1f} ms that prefill every "
                        f"request in flight")
    if closed:
        decode_s = modes.mean_decode_s(dep, 1, prompt, output)
        alone_s = stack.frontend_s + dep.step_s(dep.prefill_step(1, prompt)) + (output - 1) * decode_s
        alone = output / alone_s
        per_replica = outcome.output_tokens_per_s / dep.replicas
        if per_replica < alone * (1 - 1e-9):
            symptoms.append(f"{per_replica:,.0f} output tokens/s per replica is below the {alone:,.0f} of one "
                            "request served alone")
    held = sorted(outcome.blocked.items(), key=lambda kv: -kv[1])
    # A budget filled by the prompts it took is the engine at work: named only when it shows.
    named = [(reason, share) for reason, share in held
             if (share >= NAMED_SHARE and reason != "steps") or (symptoms and share > 0)]
    out = [f"{_sentence(dep, reason, prompt, output, batch)} ({share:.0%} of the steps held a waiting request)"
           for reason, share in named]
    if symptoms and not named:
        out.append("no engine limit held a waiting request: the requests wait for the steps ahead of them, which "
                   "take longer with the decodes they share")
    return overload + ([f"{'; '.join(symptoms)}: {out[0]}", *out[1:]] if symptoms else out)


def _sentence(dep: modes.Deployment, reason: str, prompt: int, output: int, batch: int) -> str:
    """The limit `reason` (budget, batch, kv) of the deployment's engine, with its numbers and the way out."""
    stack = dep.runtime.stack
    if reason == "budget" and not stack.chunked_prefill:
        raised = sized_budget(batch or stack.max_batch, prompt)
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
