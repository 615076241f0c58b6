"""Capacity planning for serving: the deployments that serve a request rate within latency objectives (SLOs),
ranked by GPUs, dollars or watts (the SLOs and the highest rate one deployment serves within them:
`madmax.serve.slo`).

A deployment is k replicas of one *unit*: tp x pp GPUs (times a attention-data-parallel ranks when a
mixture-of-experts model spreads its experts over ep = a tp GPUs), in one weight and KV-cache format, under
one serving stack. Requests arrive as a Poisson process at the rate asked for (or as an arrivals trace says:
its rate and mean lengths screen, every k-th of its requests is one replica's of k) and are spread round-robin
over the replicas, each running its own continuous-batching engine (`simulate --mode rate`).

1. Units: every (tp, pp) the serving search allows (tp splits the model within one scale-up domain,
   pp <= layers and `max_pp`), each expert layout of an MoE model (`search.serving.expert_layouts` with up to
   `MAX_ATTENTION_DP` attention-data-parallel ranks), each weight and KV format; a unit whose weights,
   workspace and reserve leave no KV room for one request is rejected (`memory`).
2. Screen (closed form, `search.serving.static_estimate`): a unit whose latency of one request alone misses
   an SLO misses it at every rate (`slo at zero load`). The others get an estimated capacity: the most
   requests/s of a static batch whose TPOT and end-to-end latency meet the SLOs, B a / (TTFT_B + (o - 1)
   TPOT_B), and rank by the objective of the whole replicas that capacity needs, then GPUs per request/s.
3. The `exact` best units of each system (and of each deployment kind) are simulated: the fewest replicas k
   whose one replica, at Poisson arrivals of rate / k (`simulate --mode rate`, over `steady_requests`), meets
   every SLO; an exponential search from the estimate's k, then bisection on k (more replicas, a lower rate
   each: latencies never grow). One seed for every rate: the arrival times at rate r are those at rate 1
   divided by r, so the latencies move with the rate, not with the sample. The rate of one replica fewer, which
   misses, is reported beside it. A Poisson stream split round-robin over k replicas reaches each more evenly
   than a Poisson stream of rate / k, so k is on the safe side. k is then rounded up to a cluster of at most one
   node or whole nodes (`whole_nodes`: nodes are what clusters are built of and rented by).
4. The best deployment is simulated whole at the full rate, as `simulate --mode rate` runs it (its `confirm`
   command), a replica added while it misses an SLO (at most MAX_GROWTH).

Ranked by GPUs (objective throughput: the most requests/s per GPU), cost (USD per hour: the system's price
or `price`) or energy (W at load). When no unit meets the SLOs the result lists the closest units and the
SLO each misses, not nothing.

Disaggregated deployments (`deployments` with "disaggregated"): a unit is P prefill workers and D decode workers
(`simulate --mode disaggregated`), each worker tp GPUs (times its attention-data-parallel ranks for an MoE
model), in every coprime ratio P:D up to MAX_WORKERS per side. The screen costs each worker alone: a prefill
worker's TTFT for one prompt and its requests/s at full steps (the prompts a step fits over the step), a decode
worker's TPOT and the requests/s of the largest batch whose TPOT and end-to-end latency meet the SLOs
(B / ((o - 1) TPOT_B)); the unit serves min(P x prefill, D x decode) and, alone, TTFT = prefill + KV transfer +
front end. Then as above: the fewest replicas of the unit (k P prefill and k D decode workers) at the rate.
"""

from __future__ import annotations

import math
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from madmax.config.checks import positive_number
from madmax.config.strategy import Strategy
from madmax.errors import ConfigError, MadmaxError
from madmax.results.serving import ServingResult
from madmax.serve.slo import (
    DEFAULT_REQUESTS,
    MIN_RATE,
    _fmt,
    measured,
    missed,
    parse_slos,
    steady_requests,
)

OBJECTIVES = ("throughput", "cost", "energy")  # fewest GPUs, USD per hour, W
MAX_PP = 4
MAX_ATTENTION_DP = 8
DEFAULT_EXACT = 6
# The whole deployment's confirming simulation runs the requests of a replica times the replicas, up to this.
CONFIRM_MAX_REQUESTS = 20_000
# Replicas added, at most, when the whole deployment's simulation misses an SLO.
MAX_GROWTH = 3
# Plans whose whole deployment is simulated, at most, until one meets the SLOs.
MAX_CONFIRMS = 3
# The most GPUs a deployment is planned with (2**20, beyond any cluster built): a rate that needs more is
# answered with the GPUs it needs, not simulated whole.
MAX_GPUS = 2**20
DEPLOYMENTS = ("aggregated", "disaggregated")
# Workers of one role in a disaggregated unit, at most: its ratios P:D are the coprime pairs up to it.
MAX_WORKERS = 4
RATIOS = tuple((p, d) for p in range(1, MAX_WORKERS + 1) for d in range(1, MAX_WORKERS + 1) if math.gcd(p, d) == 1)


@dataclass(frozen=True)
class Workers:
    """One role of a disaggregated unit: `count` workers of tp GPUs each, experts over ep (ep > tp: ep / tp
    attention-data-parallel ranks per worker; 1: dense, or experts split by width over tp)."""

    count: int
    tp: int
    ep: int = 1

    @property
    def dp(self) -> int:
        return self.ep // self.tp if self.ep > self.tp else 1

    @property
    def gpus(self) -> int:
        return self.count * self.tp * self.dp

    def label(self, role: str) -> str:
        return f"{role}{self.count}(tp={self.tp}" + (f",ep={self.ep}" if self.ep > 1 else "") + ")"


@dataclass(frozen=True)
class Unit:
    """What one replica is: its system, layout (tp, pp, experts), formats, and the closed-form screen."""

    system: Any = field(repr=False)  # madmax.config.hardware.System, priced
    tp: int
    pp: int
    ep: int
    etp: int
    dtype: str
    kv_dtype: str
    estimated_rate: float  # requests/s of one replica by the closed form
    zero_load: dict[str, float]  # SLO -> the closed form's latency of one request alone
    lifetime_s: float = 0.0  # the closed form's end-to-end latency of one request alone
    prefill: Workers | None = None  # a disaggregated unit's prefill workers (tp, pp, ep, etp unused)
    decode: Workers | None = None  # and its decode workers

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None

    @property
    def mode(self) -> str:
        """The serving mode `simulate` runs the unit in."""
        return "disaggregated" if self.disaggregated else "rate"

    @property
    def attention_dp(self) -> int:
        return self.ep // self.tp if self.ep > self.tp else 1

    @property
    def gpus(self) -> int:
        if self.prefill is not None and self.decode is not None:
            return self.prefill.gpus + self.decode.gpus
        return self.tp * self.pp * self.attention_dp

    def strategy(self, replicas: int = 1) -> str:
        if self.prefill is not None and self.decode is not None:
            p, d = self.prefill, self.decode
            experts = f",prefill_ep={p.ep},decode_ep={d.ep}" if self.ep > 1 else ""
            return (f"prefill_workers={replicas * p.count},prefill_tp={p.tp},decode_workers={replicas * d.count},"
                    f"decode_tp={d.tp}{experts}")
        experts = f",ep={self.ep},etp={self.etp}" if self.ep * self.etp > 1 else ""
        return f"tp={self.tp},pp={self.pp},dp={replicas * self.attention_dp}{experts}"

    def usd_per_hour(self, gpus: int) -> float | None:
        """What `gpus` GPUs of this unit's system cost an hour (None without a price)."""
        price = self.system.price_per_gpu_hour_usd
        return None if price is None else gpus * price

    def power_w(self, gpus: int) -> float | None:
        """What `gpus` GPUs of this unit's system draw at load, the rest of their nodes included (None without)."""
        s = self.system
        return s.node_power_w / s.gpus_per_node * gpus if s.node_power_w else None

    @property
    def label(self) -> str:
        if self.prefill is not None and self.decode is not None:
            return f"{self.prefill.label('P')}+{self.decode.label('D')}"
        experts = f",ep={self.ep}" if self.ep > 1 else (f",etp={self.etp}" if self.etp > 1 else "")
        return f"tp={self.tp},pp={self.pp}" + (f",dp={self.attention_dp}" if self.attention_dp > 1 else "") + experts


@dataclass
class Plan:
    """A unit's highest rate within the SLOs and the deployment of it that serves the rate asked for."""

    unit: Unit
    rate_per_replica: float  # requests/s each replica serves within the SLOs (0: none at any rate tried)
    replicas: int
    result: ServingResult | None  # one replica at rate / replicas (None: the unit serves no rate)
    misses: list[str]  # the SLOs `result` misses (or, without a rate, the lowest rate's)
    simulations: int
    confirmed: ServingResult | None = None  # the whole deployment at the rate, for the best plan
    rate_missed: float | None = None  # the rate per replica of one replica fewer, which misses an SLO

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.unit.gpus

    def serves(self, max_gpus: int | None) -> bool:
        """Whether one replica met every SLO at its share of the rate and the deployment fits the GPU cap (default
        MAX_GPUS)."""
        return self.result is not None and not self.misses and self.num_gpus <= (max_gpus or MAX_GPUS)


@dataclass
class Capacity:
    """What a capacity search found: the simulated plans (best first), the screened units, and counts."""

    model: str
    systems: list[str]
    request_rate: float
    prompt_len: int
    output_len: int
    stack: str
    slos: dict[str, float]
    objective: str
    max_gpus: int | None
    plans: list[Plan]
    screened: list[Unit]  # every unit that fits, best estimate first
    closest: list[tuple[Unit, list[str]]]  # units that miss an SLO even alone, the closest first
    enumerated: int
    rejected: dict[str, int]
    timings_s: dict[str, float] = field(default_factory=dict)
    num_requests: int = DEFAULT_REQUESTS  # simulated per replica at each rate
    spec: Any = field(default=None, repr=False)  # the model as loaded, simulated
    features: dict[str, Any] = field(default_factory=dict)  # prefix caching and speculative decoding options
    model_arg: str | None = None  # the model as the user named it (a catalog name or a file), for the command
    arrivals: str | None = None  # the arrivals CSV served instead of Poisson arrivals (its rate and mean lengths)
    trace: Any = field(default=None, repr=False)  # its (prompt, output, arrival) arrays

    def meeting(self) -> list[Plan]:
        """The plans that meet every SLO within the GPU cap, best first."""
        return [p for p in self.plans if p.serves(self.max_gpus)]

    def usd_per_million_output_tokens(self, usd_per_hour: float | None) -> float | None:
        return None if usd_per_hour is None else usd_per_hour / (self.request_rate * self.output_len * 3600) * 1e6

    def whole_requests(self, plan: Plan) -> int:
        """Requests of the whole deployment's simulation: the trace's, or a replica's at its share of the rate
        times the replicas (at most CONFIRM_MAX_REQUESTS)."""
        if self.trace is not None:
            return len(self.trace[0])
        share = steady_requests(self.request_rate / plan.replicas, self.num_requests, plan.unit.lifetime_s)
        return confirm_requests(share, plan.replicas)

    def confirm_command(self, plan: Plan) -> str:
        """The `madmax simulate` command line that runs `plan`'s deployment at the rate (or the trace)."""
        u = plan.unit
        load = (f"--arrivals {shlex.quote(self.arrivals)}" if self.arrivals is not None else
                f"--request-rate {self.request_rate:g} --prompt-len {self.prompt_len} --output-len {self.output_len}")
        count = "" if self.arrivals is not None else f" --num-requests {self.whole_requests(plan)}"
        return (f"madmax simulate -m {self.model_arg or self.model} -s {u.system.name} --num-gpus {plan.num_gpus} "
                f"--task inference --mode {u.mode} {load} --dtype {u.dtype} --kv-dtype {u.kv_dtype} "
                f"--stack {self.stack} --strategy {u.strategy(plan.replicas)}{count}"
                + "".join(f" --{k.replace('_', '-')} {v}" for k, v in self.features.items()))


def confirm_requests(per_replica: int, replicas: int) -> int:
    return min(per_replica * replicas, max(per_replica, CONFIRM_MAX_REQUESTS))


def find_capacity(model: Any, systems: Any, *, request_rate: float | None = None, slo: str | dict | None = None,
                  prompt_len: int | None = None, output_len: int | None = None, max_gpus: int | None = None,
                  stack: Any = None, dtypes: list[str] | None = None, kv_dtypes: list[str] | None = None,
                  max_tp: int | None = None, max_pp: int | None = None, objective: str = "throughput",
                  top: int = 5, exact: int | None = None, num_requests: int | None = None, seed: int = 0,
                  price: float | None = None, power: float | None = None, calibration: Any = None,
                  scenario: str | None = None, prefix_len: int | None = None, prefix_hit: float | None = None,
                  speculative: str | None = None, draft_len: int | None = None,
                  acceptance: float | None = None, draft_model: str | None = None,
                  arrivals: str | Path | None = None,
                  prompt_len_std: float | None = None, output_len_std: float | None = None,
                  deployments: list[str] | str | None = None) -> Capacity:
    """Search the deployments that serve `request_rate` requests/s within `slo` (see the module docstring), or
    within an MLPerf `scenario`'s limits (server, interactive). `systems`: one system or a list; `max_gpus`
    caps a deployment's GPUs. prefix_len, prefix_hit, speculative, draft_len and acceptance serve every candidate
    with prefix caching and speculative decoding as `simulate` takes them; prompt_len_std and output_len_std draw
    each request's lengths (the screen takes the means, every simulation the draws). `arrivals` (a CSV of arrival_s,
    prompt_len, output_len, as `simulate --arrivals`) replaces the rate and the lengths: the screen takes its
    rate and mean lengths, and k replicas are judged by one replica serving every k-th request of the trace
    (the round-robin split simulate makes), the best confirmed on the whole trace. `deployments`: "aggregated"
    (default: replicas of one engine), "disaggregated" (prefill and decode workers) or both. Raises `MadmaxError`
    on bad input."""
    from madmax import terminal
    from madmax.config.stack import load_stack

    start = time.perf_counter()
    if scenario is not None:
        slo = _scenario_slo(model, scenario, slo)
    slos = parse_slos(slo)
    if not slos:
        raise ConfigError("a capacity search needs at least one SLO; allowed: slo such as p99_ttft=1,p99_tpot=50ms")
    trace = None
    if arrivals is not None:
        trace, request_rate, prompt_len, output_len = _trace(model, arrivals, request_rate, prompt_len, output_len,
                                                             num_requests)
    elif request_rate is None:
        raise ConfigError("a capacity search needs the load: request_rate (requests/s, Poisson) or arrivals (a CSV "
                          "of arrival_s, prompt_len, output_len)")
    rate = positive_number(request_rate, "request_rate", "requests per second")
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not a serving objective; allowed: "
                          f"{', '.join(OBJECTIVES)} (fewest GPUs, USD per hour, W)")
    for name, value in (("top", top), ("exact", exact), ("max_gpus", max_gpus), ("max_tp", max_tp),
                        ("max_pp", max_pp), ("num_requests", num_requests)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name}={value!r} must be a positive integer")
    if max_gpus is not None and max_gpus > MAX_GPUS:
        raise ConfigError(f"max_gpus={max_gpus:,} is beyond the {MAX_GPUS:,} GPUs a deployment is planned with; "
                          f"allowed: at most {MAX_GPUS:,}")
    exact = max(DEFAULT_EXACT, top) if exact is None else exact
    if exact < top:
        raise ConfigError(f"exact={exact} must be at least top={top} (the reported deployments are simulated)")
    per_replica = num_requests or DEFAULT_REQUESTS
    features = {k: v for k, v in (("prefix_len", prefix_len), ("prefix_hit", prefix_hit),
                                  ("speculative", speculative), ("draft_len", draft_len),
                                  ("acceptance", acceptance), ("draft_model", draft_model),
                                  ("prompt_len_std", prompt_len_std),
                                  ("output_len_std", output_len_std)) if v is not None}
    kinds = _deployments(deployments, features, arrivals)
    stack_spec = load_stack(stack)
    system_list = systems if isinstance(systems, list | tuple) else [systems]
    if not system_list:
        raise ConfigError("systems is empty; allowed: one or more catalog systems or files")
    rejected = {"tp_divides_model": 0, "pp_layers": 0, "memory": 0, "slo at zero load": 0}
    units: list[Unit] = []
    closest: list[tuple[Unit, list[str]]] = []
    enumerated = 0
    spec = None
    lengths = (prompt_len, output_len)
    for system in system_list:
        base = _base(model, system, prompt_len, output_len, rate, calibration, price, power, objective, features)
        spec = base.spec
        lengths = (base.task.prompt_len, base.task.output_len)
        decoding = [k for k in slos if k.endswith(("_tpot", "_itl"))]
        if decoding and lengths[1] < 2:
            raise ConfigError(f"slo {', '.join(decoding)} needs a second output token; output_len={lengths[1]}; "
                              "allowed: output_len >= 2")
        if "aggregated" in kinds:
            n, found, near = _screen(base, stack_spec, slos, dtypes, kv_dtypes, max_tp, max_pp, max_gpus, rejected,
                                     features)
            enumerated += n
            units += found
            closest += near
        if "disaggregated" in kinds:
            n, found, near = _screen_disaggregated(base, stack_spec, slos, dtypes, kv_dtypes, max_tp, max_gpus,
                                                   rejected, features)
            enumerated += n
            units += found
            closest += near
    units.sort(key=lambda u: _estimated_key(u, rate, objective))
    closest.sort(key=lambda un: _worst_ratio(un[0].zero_load, slos))
    timings = {"screen": time.perf_counter() - start}
    clock = time.perf_counter()
    by_system: dict[tuple[int, bool], int] = {}
    chosen = []  # the `exact` best of each system and deployment kind, so that both are compared on simulated plans
    for u in units:
        key = (id(u.system), u.disaggregated)
        if by_system.get(key, 0) < exact:
            by_system[key] = by_system.get(key, 0) + 1
            chosen.append(u)
    terminal.expect(len(chosen) * 8)
    plans = [_plan(spec, u, rate, slos, stack_spec, lengths, per_replica, seed, calibration, features, trace)
             for u in chosen]
    plans.sort(key=lambda p: _rank(p, objective, max_gpus, slos))
    timings["simulate"] = time.perf_counter() - clock
    model_arg = str(model) if isinstance(model, str | Path) else None
    found = Capacity(model=spec.name, systems=[s if isinstance(s, str) else getattr(s, "name", "system")
                                               for s in system_list],
                     request_rate=rate, prompt_len=lengths[0], output_len=lengths[1], stack=stack_spec.name,
                     slos=slos, objective=objective, max_gpus=max_gpus, plans=plans, screened=units,
                     closest=closest[:top], enumerated=enumerated, rejected=rejected, timings_s=timings,
                     num_requests=per_replica, spec=spec, model_arg=model_arg, features=features,
                     arrivals=None if arrivals is None else str(arrivals), trace=trace)
    clock = time.perf_counter()
    for _ in range(MAX_CONFIRMS):  # the best that the whole deployment's simulation confirms
        best = found.meeting()
        if not best or _confirm(found, best[0], stack_spec, calibration, seed):
            break
        found.plans.sort(key=lambda p: _rank(p, objective, max_gpus, slos))
    timings["confirm"] = time.perf_counter() - clock
    return found


def _deployments(value: list[str] | str | None, features: dict[str, Any], arrivals: Any) -> tuple[str, ...]:
    """The deployment kinds asked for, checked: disaggregated workers serve Poisson arrivals without prefix caching
    or speculative decoding (`simulate --mode disaggregated` refuses them), so those are refused, not dropped."""
    kinds = ("aggregated",) if value is None else tuple(
        dict.fromkeys(v.strip().lower() for v in (value.split(",") if isinstance(value, str) else value)))
    if not kinds or any(k not in DEPLOYMENTS for k in kinds):
        bad = next((k for k in kinds if k not in DEPLOYMENTS), "")
        raise ConfigError(f"deployments={bad!r} is not a kind of deployment; allowed: {', '.join(DEPLOYMENTS)} "
                          "(one or both, comma-separated)")
    if "disaggregated" in kinds:
        given = [k for k in ("prefix_len", "prefix_hit", "speculative", "draft_len", "acceptance", "draft_model")
                 if k in features]
        if given:
            raise ConfigError(f"{given[0]} is modelled on aggregated engines, not on disaggregated workers; allowed: "
                              "deployments=aggregated, or leave it out")
        if arrivals is not None:
            raise ConfigError("arrivals (a trace) is served by aggregated replicas; disaggregated workers are planned "
                              "at a Poisson request_rate; allowed: deployments=aggregated, or request_rate with "
                              "prompt_len and output_len")
    return kinds


def _scenario_slo(model: Any, name: str, slo: Any) -> dict[str, float]:
    """The SLOs of MLPerf scenario `name` for `model`; offline (no latency limits) and a second set of limits
    are refused."""
    from madmax.config.loaders import load_model
    from madmax.config.scenarios import scenario

    chosen = scenario(name, load_model(model).name)
    if chosen.slo is None:
        raise ConfigError(f"scenario={chosen.name} has no latency limits to plan capacity against; allowed: server, "
                          "interactive, or slo=...")
    if slo is not None:
        raise ConfigError(f"slo and scenario={chosen.name} both set the latency limits; allowed: one of them")
    return chosen.slo


def _trace(model: Any, arrivals: Any, rate: Any, prompt_len: Any, output_len: Any, num_requests: Any
           ) -> tuple[tuple, float, int, int]:
    """The arrivals CSV as (prompt, output, arrival) arrays, its rate ((n - 1) / its span) and mean lengths; the
    options it replaces, when given too, are refused rather than ignored."""
    from madmax.config.loaders import load_model
    from madmax.serve import read_arrivals

    given = [name for name, value in (("request_rate", rate), ("prompt_len", prompt_len),
                                      ("output_len", output_len), ("num_requests", num_requests)) if value is not None]
    if given:
        raise ConfigError(f"{given[0]} and arrivals both describe the load; allowed: arrivals alone (its times and "
                          "lengths), or request_rate with prompt_len and output_len")
    prompt, output, arrival = read_arrivals(Path(arrivals), load_model(model).max_seq_len)
    span = float(arrival[-1] - arrival[0])
    if len(arrival) < 2 or span <= 0:
        raise ConfigError(f"arrivals {str(arrivals)!r} has {len(arrival)} request(s) over {span:g} s: no rate to plan "
                          "for; allowed: at least two requests at different times")
    rate = (len(arrival) - 1) / span
    return (prompt, output, arrival), rate, max(1, round(float(prompt.mean()))), max(1, round(float(output.mean())))


def _base(model, system, prompt_len, output_len, rate, calibration, price, power, objective, features):
    """The request of one node of `system` (its price and power replaced where given), checked."""
    from madmax.request import resolve_request

    base = resolve_request(model, system, None, "inference", calibration=calibration, prompt_len=prompt_len,
                           output_len=output_len, mode="rate", request_rate=rate, **features)
    if not base.workload.generates_tokens:
        raise ConfigError(f"a capacity search plans the serving of models that generate tokens; {base.spec.name} "
                          "runs one forward pass per batch; allowed: simulate --task inference --batch B")
    if base.task.prompt_len is None or base.task.output_len is None:
        raise ConfigError("a capacity search needs prompt_len and output_len (tokens per request); allowed: "
                          "positive integers")
    costed = base.system.with_costs(price, power)
    if objective == "cost" and costed.price_per_gpu_hour_usd is None:
        raise ConfigError(f"objective cost needs a price for system {costed.name}, which has none; allowed: "
                          "price (USD per GPU-hour), or objective throughput")
    return replace(base, system=costed)


def _screen(base, stack, slos, dtypes, kv_dtypes, max_tp, max_pp, max_gpus, rejected, features):
    """Every unit of one system, screened in closed form: (enumerated, units that may meet the SLOs, units
    that miss one alone with what they miss)."""
    from madmax.config.loaders import load_system
    from madmax.config.stack import launched
    from madmax.request import resolve_request
    from madmax.search.serving import expert_layouts, formats_to_try, static_estimate
    from madmax.serve import modes
    from madmax.serve.deployment import engine_settings, replica, runtime_of, tp_splits
    from madmax.serve.deployment import formats as formats_of

    spec, system = base.spec, base.system
    p, o = base.task.prompt_len, base.task.output_len
    domain = system.scale_up_domain
    layouts = []
    enumerated = 0
    pps = [d for d in (1, 2, 4, 8, 16) if d <= (max_pp or MAX_PP)]
    for tp in (d for d in range(1, domain + 1) if domain % d == 0 and d <= (max_tp or domain)):
        for pp in pps:
            enumerated += 1
            if not tp_splits(spec, tp):
                rejected["tp_divides_model"] += 1
            elif pp > spec.num_layers:
                rejected["pp_layers"] += 1
            else:
                layouts += [(tp, pp, ep, etp) for ep, etp in expert_layouts(spec, tp, MAX_ATTENTION_DP)]
    found, near = [], []
    requests: dict[tuple[str, str], Any] = {}
    formats = formats_to_try(base, dtypes, kv_dtypes)
    for dtype, kv in formats:
        for tp, pp, ep, etp in layouts:
            a = ep // tp if ep > tp else 1
            gpus = tp * pp * a
            if max_gpus is not None and gpus > max_gpus:
                continue
            if (dtype, kv) not in requests:  # the workload depends on the formats, not on the GPU count
                requests[dtype, kv] = resolve_request(spec, system, gpus, "inference", calibration=base.calibration,
                                                      prompt_len=p, output_len=o, dtype=dtype, kv_dtype=kv,
                                                      mode="rate", request_rate=base.task.request_rate, **features)
            request = replace(requests[dtype, kv], system=load_system(system, gpus))
            engine, _ = launched(stack, request.task.launch, stack.max_batch, p, "agg")
            strategy = Strategy(tp=tp, pp=pp, dp=a, ep=ep, etp=etp)
            rep = replica(request, strategy, engine, formats_of(request), engine.max_num_tokens,
                          min(engine.max_batch, engine.max_num_tokens), p + o)
            if rep.max_sequences < 1:
                rejected["memory"] += 1
                continue
            dep = modes.Deployment(rep, runtime_of(request, engine), a, p + o, **engine_settings(request))
            ttft, tpot = static_estimate(dep, 1, p, o, mid_decode=True)
            alone = _latencies(ttft + engine.frontend_s, tpot, o)
            unit = Unit(system, tp, pp, ep, etp, dtype, kv, 0.0, {k: alone[k.partition("_")[2]] for k in slos},
                        alone["e2e"])
            if any(unit.zero_load[k] > limit for k, limit in slos.items()):
                rejected["slo at zero load"] += 1
                near.append((unit, [f"{k} {_fmt(unit.zero_load[k])} > {_fmt(v)} with one request alone"
                                    for k, v in slos.items() if unit.zero_load[k] > v]))
                continue
            rate = _estimated_rate(dep, engine, slos, p, o, min(rep.max_sequences, engine.max_batch * pp))
            found.append(replace(unit, estimated_rate=rate or 1 / (ttft + (o - 1) * tpot)))
    return enumerated * max(1, len(formats)), found, near


def _screen_disaggregated(base, stack, slos, dtypes, kv_dtypes, max_tp, max_gpus, rejected, features):
    """Every disaggregated unit of one system (see the module docstring), screened in closed form: (enumerated,
    units that may meet the SLOs, units that miss one alone with what they miss)."""
    from madmax.request import resolve_request
    from madmax.search.serving import formats_to_try, static_estimate
    from madmax.serve import disaggregated_workers, modes

    spec, system = base.spec, base.system
    p, o = base.task.prompt_len, base.task.output_len
    node = system.gpus_per_node
    layouts = _worker_layouts(spec, system.scale_up_domain, max_tp, rejected)
    found, near = [], []
    enumerated = 0
    for dtype, kv in formats_to_try(base, dtypes, kv_dtypes):
        for pre_layout in layouts:
            for dec_layout in layouts:
                enumerated += len(RATIOS)
                pair = (Workers(1, *pre_layout), Workers(1, *dec_layout))
                gpus = pair[0].gpus + pair[1].gpus
                # A worker pair need not be a whole number of nodes (the units below are): sized as it is.
                request = resolve_request(spec, system.model_copy(update={"num_gpus": gpus}), None, "inference",
                                          calibration=base.calibration, prompt_len=p, output_len=o, dtype=dtype,
                                          kv_dtype=kv, mode="disaggregated", request_rate=base.task.request_rate,
                                          **features)
                unit = Unit(system, 0, 1, max(pre_layout[1], dec_layout[1]), 1, dtype, kv, 0.0, {},
                            prefill=pair[0], decode=pair[1])
                strategy = Strategy.model_validate({"prefill_workers": 1, "prefill_tp": pair[0].tp,
                                                    "prefill_ep": pair[0].ep, "decode_workers": 1,
                                                    "decode_tp": pair[1].tp, "decode_ep": pair[1].ep})
                w = disaggregated_workers(request, strategy, stack)
                if w.prefill.replica.max_sequences < 1 or w.decode.replica.max_sequences < 1:
                    rejected["memory"] += len(RATIOS)
                    continue
                ttft = static_estimate(w.prefill, 1, p, o)[0] + w.transfer_s(p) + w.decode_stack.frontend_s
                tpot = static_estimate(w.decode, 1, p, o, mid_decode=True)[1]
                alone = _latencies(ttft, tpot, o)
                zero = {k: alone[k.partition("_")[2]] for k in slos}
                if any(zero[k] > limit for k, limit in slos.items()):
                    rejected["slo at zero load"] += len(RATIOS)
                    near.append((replace(unit, zero_load=zero, lifetime_s=alone["e2e"]),
                                 [f"{k} {_fmt(zero[k])} > {_fmt(v)} with one request alone"
                                  for k, v in slos.items() if zero[k] > v]))
                    continue
                fit = w.prefill.runtime.stack.prompts_per_step(p)
                prefill_rate = w.prefill_strategy.dp * fit / static_estimate(w.prefill, fit, p, o)[0]
                cap = max(1, min(w.decode.replica.max_sequences, w.decode_stack.max_batch))
                decode_rate = _decode_rate(w.decode, slos, ttft, p, o, modes.batch_ladder(cap))
                for count_p, count_d in RATIOS:
                    ratio = replace(unit, prefill=replace(pair[0], count=count_p),
                                    decode=replace(pair[1], count=count_d), zero_load=zero, lifetime_s=alone["e2e"])
                    if (max_gpus is not None and ratio.gpus > max_gpus) or not _whole_unit(ratio.gpus, node):
                        continue
                    rate = min(count_p * prefill_rate, count_d * decode_rate)
                    found.append(replace(ratio, estimated_rate=rate or 1 / alone["e2e"]))
    return enumerated, found, near


def _whole_unit(gpus: int, node: int) -> bool:
    """Whether every replica count of a unit of `gpus` GPUs can be rounded to a cluster `simulate` takes (at most
    one node, or whole nodes): the unit divides a node or is whole nodes."""
    return node % gpus == 0 if gpus <= node else gpus % node == 0


def whole_nodes(replicas: int, gpus: int, node: int) -> int:
    """The fewest replicas >= `replicas` whose GPUs are at most one node or whole nodes of `node` GPUs: nodes are
    what a cluster is built of and rented by (5 replicas of 2 GPUs on 8-GPU nodes are planned as 8)."""
    while replicas * gpus > node and (replicas * gpus) % node:
        replicas += 1
    return replicas


def _worker_layouts(spec, domain: int, max_tp: int | None, rejected: dict[str, int]) -> list[tuple[int, int]]:
    """(tp, ep) of a disaggregated worker: tp splitting the model within a scale-up domain; for an MoE model the
    experts split by width over tp (ep 1), one group per rank (ep tp) or over a attention-data-parallel ranks
    (ep a tp), as `simulate` takes prefill_ep and decode_ep."""
    from madmax.search.serving import expert_layouts
    from madmax.serve.deployment import tp_splits

    out = []
    for tp in (d for d in range(1, domain + 1) if domain % d == 0 and d <= (max_tp or domain)):
        if not tp_splits(spec, tp):
            rejected["tp_divides_model"] += 1
            continue
        out += [(tp, ep) for ep, etp in expert_layouts(spec, tp, MAX_ATTENTION_DP) if ep == 1 or etp == 1]
    return out


def _decode_rate(dep, slos: dict[str, float], ttft: float, prompt: int, output: int, ladder: list[int]) -> float:
    """Requests/s of one decode worker: the largest batch on `ladder` whose TPOT (and end-to-end latency, with a
    prefill's `ttft` before it) meets the SLOs, B a / ((o - 1) TPOT_B) with a its attention-data-parallel ranks;
    found by bisection (both grow with the batch); 0 when even one request misses."""
    from madmax.search.serving import static_estimate

    steps = max(1, output - 1)

    def rate(batch: int) -> float | None:
        tpot = static_estimate(dep, batch, prompt, output, mid_decode=True)[1]
        at = _latencies(ttft, tpot, output)
        if any(at[k.partition("_")[2]] > v for k, v in slos.items() if "ttft" not in k):
            return None
        return dep.replicas * batch / (steps * tpot) if tpot > 0 else math.inf

    return _bisect_rate(ladder, rate)


def _estimated_rate(dep, engine, slos: dict[str, float], prompt: int, output: int, cap: int) -> float:
    """Requests/s of one replica by the closed form: the largest static batch on the ladder to `cap` whose
    decode step and end-to-end latency meet the SLOs other than TTFT's (a served TTFT is the queue's, not a
    static batch's prefill), found by bisection (both grow with the batch), served at a B / (TTFT_B + (o - 1)
    TPOT_B) with a the unit's attention-data-parallel ranks; 0 when even one request misses."""
    from madmax.search.serving import static_estimate
    from madmax.serve import modes

    def rate(batch: int) -> float | None:
        ttft, tpot = static_estimate(dep, batch, prompt, output, mid_decode=True)
        at = _latencies(ttft + engine.frontend_s, tpot, output)
        if any(at[k.partition("_")[2]] > v for k, v in slos.items() if "ttft" not in k):
            return None
        return dep.replicas * batch / (ttft + (output - 1) * tpot)

    return _bisect_rate(modes.batch_ladder(max(1, cap)), rate)


def _bisect_rate(ladder: list[int], rate) -> float:
    """The best `rate(batch)` over the ladder's batches that meet the SLOs (`rate` None where one misses), found by
    bisection: a larger batch misses wherever a smaller one does (its latencies only grow)."""
    lo, hi, best = -1, len(ladder), 0.0  # ladder[lo] meets, ladder[hi] misses
    while hi - lo > 1:
        mid = (lo + hi) // 2
        value = rate(ladder[mid])
        if value is None:
            hi = mid
        else:
            lo, best = mid, max(best, value)
    return best


def _latencies(ttft: float, tpot: float, output: int) -> dict[str, float]:
    return {"ttft": ttft, "tpot": tpot, "itl": tpot, "e2e": ttft + (output - 1) * tpot}


def _worst_ratio(latency: dict[str, float], slos: dict[str, float]) -> float:
    return max(latency[k] / v for k, v in slos.items())


def _plan(model: Any, unit: Unit, rate: float, slos: dict[str, float], stack, lengths, per_replica: int, seed: int,
          calibration, features: dict[str, Any], trace: tuple | None = None) -> Plan:
    """The fewest replicas of `unit` whose one replica, at rate / replicas, meets every SLO: an exponential
    search from the estimate's count, then bisection on the integer count (more replicas, a lower rate each,
    never a higher latency). The unit serves no rate when one replica misses an SLO at a rate below
    `idle_rate` (a request every ten latencies of one alone)."""
    from madmax import terminal

    count = [0]
    cache: dict[int, ServingResult] = {}

    def meets(k: int) -> bool:
        if k not in cache:
            if trace is not None:  # one replica's share of the trace: every k-th request
                cache[k] = _simulate_trace(model, unit, 1, _thinned(trace, k), stack, calibration, features)
            else:
                n = steady_requests(rate / k, per_replica, unit.lifetime_s)
                cache[k] = _simulate(model, unit, 1, rate / k, stack, lengths, n, seed, calibration, features)
            count[0] += 1
            terminal.advance()
        return not missed(cache[k], slos)

    idle_rate = 0.1 / max(unit.zero_load.get(k, 0.0) for k in slos) if slos else 0.0
    guess = max(1, math.ceil(rate / unit.estimated_rate * (1 - 1e-12)))
    step = 1
    if meets(guess):
        hi, lo = guess, 0
        while hi - step >= 1:
            if not meets(hi - step):
                lo = hi - step
                break
            hi, step = hi - step, 2 * step
    else:
        lo = guess
        while True:
            k = lo + step
            if rate / k < MIN_RATE:  # even a replica with almost no requests misses: the unit serves no rate
                last = cache[lo]
                return Plan(unit, 0.0, 0, None, missed(last, slos), count[0])
            if rate / k < idle_rate and not meets(k):
                return Plan(unit, 0.0, 0, None, missed(cache[k], slos), count[0])
            if meets(k):
                hi = k
                break
            lo, step = k, 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    whole = whole_nodes(hi, unit.gpus, unit.system.gpus_per_node)
    if whole != hi and not meets(whole):  # more replicas, a lower rate each: it meets as hi did
        return Plan(unit, 0.0, 0, None, missed(cache[whole], slos), count[0])
    return Plan(unit, rate / whole, whole, cache[whole], [], count[0], rate_missed=rate / lo if lo else None)


def _simulate(model: Any, unit: Unit, replicas: int, rate: float, stack, lengths, num_requests: int, seed: int,
              calibration, features: dict[str, Any]) -> ServingResult:
    from madmax.api import simulate

    try:
        return simulate(model, unit.system, unit.gpus * replicas, task="inference", mode=unit.mode, request_rate=rate,
                        prompt_len=lengths[0], output_len=lengths[1], dtype=unit.dtype, kv_dtype=unit.kv_dtype,
                        strategy=unit.strategy(replicas), stack=stack, num_requests=num_requests, seed=seed,
                        calibration=calibration, **features)
    except MadmaxError as exc:  # a unit the screen kept but simulate refuses is a search bug
        raise AssertionError(f"the capacity search kept a layout simulate refuses: {exc}") from exc


def _thinned(trace: tuple, k: int) -> tuple:
    """The requests a replica of k gets when the trace is dealt round-robin: every k-th, from the first."""
    return tuple(values[::k] for values in trace)


def _simulate_trace(model: Any, unit: Unit, replicas: int, trace: tuple, stack, calibration,
                    features: dict[str, Any]) -> ServingResult:
    """`simulate --mode rate --arrivals` of `trace` (prompt, output, arrival arrays), written to a scratch CSV."""
    import tempfile

    from madmax.api import simulate
    from madmax.config.checks import scratch_root

    prompt, output, arrival = trace
    with tempfile.TemporaryDirectory(prefix="madmax-capacity-", dir=scratch_root()) as scratch:
        path = Path(scratch) / "arrivals.csv"
        rows = "".join(f"{float(a)!r},{int(p)},{int(o)}\n"
                       for p, o, a in zip(prompt, output, arrival, strict=True))
        path.write_text("arrival_s,prompt_len,output_len\n" + rows, encoding="utf-8")
        try:
            return simulate(model, unit.system, unit.gpus * replicas, task="inference", mode="rate",
                            arrivals=str(path), dtype=unit.dtype, kv_dtype=unit.kv_dtype,
                            strategy=unit.strategy(replicas), stack=stack, calibration=calibration, **features)
        except MadmaxError as exc:  # a unit the screen kept but simulate refuses is a search bug
            raise AssertionError(f"the capacity search kept a layout simulate refuses: {exc}") from exc


def _confirm(found: Capacity, plan: Plan, stack, calibration, seed: int) -> bool:
    """The plan's whole deployment simulated at the full rate, a replica added (more where whole nodes need them)
    while it misses an SLO; whether it met them (else the plan carries the whole deployment's misses and leaves
    the meeting plans)."""
    lengths = (found.prompt_len, found.output_len)
    tried = plan.replicas
    for _ in range(MAX_GROWTH + 1):
        if found.trace is not None:
            whole = _simulate_trace(found.spec, plan.unit, plan.replicas, found.trace, stack, calibration,
                                    found.features)
        else:
            n = found.whole_requests(plan)
            whole = _simulate(found.spec, plan.unit, plan.replicas, found.request_rate, stack, lengths, n, seed,
                              calibration, found.features)
        plan.confirmed = whole
        if not (misses := missed(whole, found.slos)):
            return True
        tried = plan.replicas
        plan.replicas = whole_nodes(plan.replicas + 1, plan.unit.gpus, plan.unit.system.gpus_per_node)
    plan.replicas = tried
    plan.misses = [f"the whole deployment: {m}" for m in misses]
    return False


def _rank(plan: Plan, objective: str, max_gpus: int | None, slos: dict[str, float]) -> tuple:
    """Plans that serve the rate within the SLOs and the GPU cap first, by the objective, then by the slack of
    their tightest SLO (the largest measured / limit, smallest first); then the others by GPUs."""
    if not plan.serves(max_gpus):
        return (True, math.inf, plan.num_gpus if plan.replicas else math.inf)
    return (False, _value(plan, objective), max((measured(plan.result, k) or 0.0) / v for k, v in slos.items()))


def _estimated_key(unit: Unit, rate: float, objective: str) -> tuple[float, float]:
    """A screened unit's rank: the objective of the replicas its estimate needs for `rate` (whole replicas: a
    2-GPU unit that serves the rate alone beats a 4-GPU one with more to spare), then GPUs per request/s."""
    replicas = whole_nodes(math.ceil(rate / unit.estimated_rate * (1 - 1e-12)), unit.gpus, unit.system.gpus_per_node)
    plan = Plan(unit, rate / replicas, replicas, None, [], 0)
    return _value(plan, objective), unit.gpus / unit.estimated_rate


def _value(plan: Plan, objective: str) -> float:
    if objective == "cost":  # every system is priced (`_base` refuses one without a price)
        return plan.unit.usd_per_hour(plan.num_gpus)
    if objective == "energy":
        return plan.unit.power_w(plan.num_gpus) or math.inf
    return plan.num_gpus


def rows(found: Capacity) -> list[dict[str, Any]]:
    """One row per simulated plan (best first), then per screened unit not simulated: the frame's records."""
    out = []
    simulated = {id(p.unit) for p in found.plans}
    for p in found.plans:
        result = p.confirmed or p.result
        out.append(_row(found, p.unit, simulated=True, rate=p.rate_per_replica, rate_missed=p.rate_missed,
                        replicas=p.replicas or None,
                        result=result, misses=missed(result, found.slos) if result is not None else p.misses,
                        confirmed=p.confirmed is not None))
    for u in found.screened:
        if id(u) not in simulated:
            replicas = whole_nodes(math.ceil(found.request_rate / u.estimated_rate), u.gpus, u.system.gpus_per_node)
            out.append(_row(found, u, simulated=False, rate=None, rate_missed=None, replicas=replicas, result=None,
                            misses=[], confirmed=False))
    return out


def _row(found: Capacity, u: Unit, *, simulated: bool, rate: float | None, rate_missed: float | None,
         replicas: int | None,
         result: ServingResult | None, misses: list[str], confirmed: bool) -> dict[str, Any]:
    gpus = replicas * u.gpus if replicas else None
    per_hour = u.usd_per_hour(gpus) if gpus else None
    p, d = u.prefill, u.decode
    layout = ({"tp": None, "pp": None, "ep": None, "etp": None, "attention_dp": None} if u.disaggregated else
              {"tp": u.tp, "pp": u.pp, "ep": u.ep, "etp": u.etp, "attention_dp": u.attention_dp})
    row = {"system": u.system.name, "deployment": "disaggregated" if u.disaggregated else "aggregated",
           "replica": u.label, **layout,
           "prefill_workers": p.count if p else None, "prefill_tp": p.tp if p else None,
           "prefill_ep": p.ep if p else None, "decode_workers": d.count if d else None,
           "decode_tp": d.tp if d else None, "decode_ep": d.ep if d else None,
           "dtype": u.dtype, "kv_dtype": u.kv_dtype, "gpus_per_replica": u.gpus,
           "simulated": simulated, "estimated_rate_per_replica": u.estimated_rate,
           "rate_per_replica": rate, "rate_missed_per_replica": rate_missed, "replicas": replicas,
           "num_gpus": gpus,
           "meets": simulated and result is not None and not misses and (gpus or 0) <= (found.max_gpus or MAX_GPUS),
           "missed": "; ".join(misses) if simulated else None, "confirmed": confirmed,
           "usd_per_hour": per_hour, "usd_per_million_output_tokens": found.usd_per_million_output_tokens(per_hour),
           "power_w": u.power_w(gpus) if gpus else None,
           # the engine command of one replica (`madmax.results.launch`), as simulated
           "launch_command": result.launch[0]["command"] if result is not None and result.launch else None}
    for key in found.slos:
        row[f"{key}_s"] = measured(result, key) if result is not None else None
    return row


def summary(found: Capacity, top: int) -> dict[str, Any]:
    """The search's inputs, counts and best plans, for --json."""
    best = found.meeting()[:top]
    return {"model": found.model, "systems": found.systems, "task": "inference", "mode": "rate",
            "request_rate": found.request_rate, "arrivals": found.arrivals, "prompt_len": found.prompt_len,
            "output_len": found.output_len,
            "stack": found.stack, "slo": found.slos, "objective": found.objective, "max_gpus": found.max_gpus,
            "enumerated": found.enumerated, "rejected": found.rejected, "screened": len(found.screened),
            "simulated": len(found.plans), "timings_s": found.timings_s,
            "deployments": [r for r in rows(found) if r["meets"]][:top],
            "confirm": found.confirm_command(best[0]) if best else None,
            "launch": ((best[0].confirmed or best[0].result).launch if best else []),
            "closest": [] if best else [{"system": u.system.name, "replica": u.label, "dtype": u.dtype,
                                         "kv_dtype": u.kv_dtype, "missed": misses}
                                        for u, misses in closest(found, top)]}


def closest(found: Capacity, top: int) -> list[tuple[Unit, list[str]]]:
    """When nothing meets the SLOs: the simulated units and those that miss alone, the closest first, each with
    the SLOs it misses (at the lowest rate tried, or with one request alone)."""
    simulated = [(p.unit, p.misses) for p in found.plans if p.misses or p.result is None]
    limit = (f"max_gpus={found.max_gpus:,}" if found.max_gpus
             else f"{MAX_GPUS:,} GPUs, the most a deployment is planned with")
    over = [(p.unit, [f"needs {p.num_gpus:,} GPUs; allowed: at most {limit}"])
            for p in found.plans if p.result is not None and not p.misses and not p.serves(found.max_gpus)]
    return (over + simulated + found.closest)[:top]


__all__ = ["Capacity", "Plan", "Unit", "closest", "find_capacity", "rows", "summary"]
