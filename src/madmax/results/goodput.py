"""Goodput: the expected wall-clock time to train a token budget when components fail, checkpoints stall the
step, restarts cost time and the slowest GPU sets the pace (docs/goodput.md has the equations and their check).

For a job of G GPUs in n nodes, an iteration of T seconds making B tokens, and N tokens to train:

    ideal      W0 = N T / B                          the simulated iterations, back to back
    stragglers W  = W0 (1 + sigma z_G)               z_G: expected largest of G standard normals (Blom)
    failures   lambda = sum_c rate_c x (G or n)      Poisson failures per second of the job; planned stops lambda_p
    checkpoint C bytes: the weights and optimizer state of the trainable parameters; written by every rank at
               once at b = min(n x node_bytes_per_s, filesystem_bytes_per_s): w = C / b; the step stalls
               delta = stall_s + w (synchronous) or stall_s + the copy of a rank's share C / G over its host
               link (asynchronous)
    restart    R = restart_s + load (weights and state / b) + warmup_s, and for a failure that takes a node out
               (lambda_n of lambda) the wait for a spare: none with spares enough, repair_s without any, and
               with S spares of a node repaired in repair_s the M/M/S queue's mean wait
               C(S, a) repair_s / (S - a), a = lambda_n repair_s (Erlang C), at most repair_s
    lost work  L = (tau + delta) / 2 (+ w asynchronous: the write in flight is not yet a checkpoint)
    planned    P = stall_s + w + R: a planned stop saves a checkpoint first (nothing is lost), then restarts
    wall       T_wall = W (1 + delta / tau) / (1 - lambda (R + L) - lambda_p P)

Every failure costs R + L, and failures arrive at lambda over the whole wall time (restarts fail too), hence the
denominator. The interval tau that minimises T_wall solves tau^2 + 2 delta tau = 2 delta a / lambda with
a = 1 - lambda (R + delta / 2 + w_async) - lambda_p P (Young's sqrt(2 delta / lambda) when lambda R and delta are
small); it is rounded to whole iterations and kept at least one iteration and one write long. The model is first
order: it assumes tau and R much shorter than the mean time between failures 1 / lambda, and exponential failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from madmax.config.reliability import Per, Reliability
from madmax.errors import ConfigError, MadmaxError

SECONDS_PER_HOUR = 3600.0
_NORMAL = NormalDist()


@dataclass(frozen=True)
class JobState:
    """What the goodput model needs from a simulated training iteration."""

    iteration_time_s: float
    tokens_per_iteration: float
    num_gpus: int
    gpus_per_node: int
    checkpoint_bytes: float  # written at each checkpoint: weights and optimizer state of the trainable parameters
    restore_bytes: float  # read at each restart: every weight and the optimizer state
    host_bytes_per_s: float  # one GPU's copy to host memory (an asynchronous checkpoint's stall)

    @property
    def nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)


@dataclass(frozen=True)
class Goodput:
    """Expected time to train `tokens`, with its parts (seconds of wall clock; they add up to `wall_s`)."""

    tokens: float
    profile: str
    ideal_s: float
    stragglers_s: float
    checkpoint_s: float
    lost_work_s: float
    restart_s: float
    wall_s: float
    interruptions: float
    interruptions_by_component: dict[str, float]
    mtbf_s: float
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_stall_s: float
    checkpoint_interval_s: float | None
    checkpoint_interval_chosen: bool
    restart_each_s: float
    straggler_slowdown: float
    assumptions: list[str] = field(default_factory=list)
    spare_wait_s: float = 0.0  # mean wait for a spare of a failure that takes a node out

    @property
    def goodput(self) -> float:
        """Share of the wall clock the ideal iterations would take."""
        return self.ideal_s / self.wall_s if self.wall_s > 0 else 1.0

    @property
    def effective_training_time_ratio(self) -> float:
        """Share of the wall clock spent training (Meta's ETTR): stragglers' slower steps count as training;
        checkpoint stalls, lost work and restarts do not."""
        return (self.ideal_s + self.stragglers_s) / self.wall_s if self.wall_s > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "profile": self.profile, "wall_s": self.wall_s, "goodput": self.goodput,
                "effective_training_time_ratio": self.effective_training_time_ratio,
                "breakdown_s": {"ideal": self.ideal_s, "stragglers": self.stragglers_s,
                                "checkpoint_stalls": self.checkpoint_s, "lost_work": self.lost_work_s,
                                "restarts": self.restart_s},
                "interruptions": self.interruptions, "interruptions_by_component": self.interruptions_by_component,
                "mtbf_s": self.mtbf_s if math.isfinite(self.mtbf_s) else None,
                "checkpoint_bytes": self.checkpoint_bytes,
                "checkpoint_write_s": self.checkpoint_write_s, "checkpoint_stall_s": self.checkpoint_stall_s,
                "checkpoint_interval_s": self.checkpoint_interval_s,
                "checkpoint_interval_chosen": self.checkpoint_interval_chosen,
                "restart_each_s": self.restart_each_s, "spare_wait_s": self.spare_wait_s,
                "straggler_slowdown": self.straggler_slowdown, "assumptions": list(self.assumptions)}


def expected_max_normal(n: int) -> float:
    """Expected largest of n standard normal draws, by Blom's approximation Phi^-1((n - 0.375) / (n + 0.25));
    0 for one draw."""
    if n <= 1:
        return 0.0
    return _NORMAL.inv_cdf((n - 0.375) / (n + 0.25))


def straggler_slowdown(profile: Reliability, num_gpus: int) -> float:
    """The synchronous step's time over the median GPU's: 1 + sigma x the expected slowest of the job's GPUs, no
    slower than the fleet's (1 - exclude_slowest) quantile when the slowest are excluded."""
    s = profile.stragglers
    z = expected_max_normal(num_gpus)
    if s.exclude_slowest > 0:
        z = min(z, _NORMAL.inv_cdf(1.0 - s.exclude_slowest))
    return 1.0 + s.speed_sigma * max(z, 0.0)


def failure_rates(profile: Reliability, num_gpus: int, nodes: int) -> dict[str, float]:
    """Interruptions per second of the job, by component."""
    return {f.component: f.rate_per_hour * (num_gpus if f.per is Per.GPU else nodes) / SECONDS_PER_HOUR
            for f in profile.failures}


def spare_wait(rate: float, repair_s: float, spares: int | None) -> float:
    """Mean wait of a failure that takes a node out for a spare: 0 with as many spares as needed (None),
    repair_s with none; with S spares, each failed node back after repair_s, the mean wait in queue of an M/M/S
    queue of offered load a = rate x repair_s: C(S, a) repair_s / (S - a) (Erlang C), and repair_s once
    the spares cannot keep up (a >= S: every failure then finds the pool empty and waits about a repair)."""
    if spares is None or repair_s == 0:
        return 0.0
    a = rate * repair_s
    if spares == 0 or a >= spares:
        return repair_s
    term, below = 1.0, 0.0  # a^k / k!, and its sum over k < S
    for k in range(spares):
        below += term
        term *= a / (k + 1)
    tail = term * spares / (spares - a)
    waits = tail / (below + tail)  # C(S, a): the chance that every spare is taken
    return min(repair_s, waits * repair_s / (spares - a))


def _wall(work_s: float, tau: float, stall: float, lam: float, fixed: float, planned: float = 0.0) -> float:
    """Expected wall time for `work_s` of training checkpointed every `tau` s of training (inf when failures
    outpace progress). fixed: the per-failure cost that does not depend on tau (R, plus w when asynchronous);
    planned: the planned stops' share of the wall clock (lambda_p P)."""
    loss = lam * (fixed + (tau + stall) / 2) + planned
    return work_s * (1 + stall / tau) / (1 - loss) if loss < 1 else math.inf


def goodput(job: JobState, profile: Reliability, tokens: float) -> Goodput:
    """Expected time to train `tokens` tokens with `profile`'s failures, checkpoints, restarts and stragglers.
    ConfigError for a checkpoint interval shorter than a write or an iteration, or failures without checkpoints;
    MadmaxError when interruptions come faster than the job can recover from them."""
    nodes = job.nodes
    rates = failure_rates(profile, job.num_gpus, nodes)
    planned_classes = {f.component for f in profile.failures if f.planned}
    lam = sum(r for c, r in rates.items() if c not in planned_classes)
    lam_p = sum(r for c, r in rates.items() if c in planned_classes)
    slow = straggler_slowdown(profile, job.num_gpus)
    ideal = tokens / job.tokens_per_iteration * job.iteration_time_s
    work = ideal * slow
    ck, rs = profile.checkpoint, profile.restart
    bandwidth = min(nodes * ck.node_bytes_per_s, ck.filesystem_bytes_per_s)
    write = job.checkpoint_bytes / bandwidth
    stall = ck.stall_s + (write if not ck.asynchronous else job.checkpoint_bytes / job.num_gpus / job.host_bytes_per_s)
    base = rs.restart_s + job.restore_bytes / bandwidth + rs.warmup_s
    lam_n = sum(rates[f.component] for f in profile.failures if f.replaces_node and not f.planned)
    spares = rs.spares if rs.spares is not None else (None if rs.spare_nodes else 0)
    wait = spare_wait(lam_n, rs.repair_s, spares)
    restart = base + (lam_n / lam * wait if lam > 0 else 0.0)  # the mean over the failures
    fixed = restart + (write if ck.asynchronous else 0.0)
    stop = ck.stall_s + write + base  # a planned stop: a final, complete checkpoint, then the restart
    assumptions = [f"reliability profile {profile.name}: {profile.description}".rstrip(": ")]
    if lam + lam_p > 0 and not ck.enabled:
        raise ConfigError(f"reliability {profile.name!r} has failures but checkpoint.enabled=false: every interruption "
                          "would restart from the first iteration; allowed: checkpoints enabled, or rates of 0")
    if not ck.enabled and ck.interval_s is not None:
        raise ConfigError(f"checkpoint_interval={ck.interval_s:g} s applies to checkpoints, but reliability"
                          f" {profile.name!r} has checkpoint.enabled=false; allowed: a profile that checkpoints")
    shortest = max(job.iteration_time_s, write)
    tau: float | None
    if not ck.enabled or (lam == 0 and ck.interval_s is None):  # nothing to checkpoint against
        tau, chosen, stall_total = None, False, 0.0
    else:
        if ck.interval_s is not None:
            if ck.interval_s < shortest:
                what = (f"a checkpoint write ({write:.3g} s of {job.checkpoint_bytes / 1e12:.3g} TB at "
                        f"{bandwidth / 1e9:.3g} GB/s)" if write >= job.iteration_time_s
                        else f"an iteration ({job.iteration_time_s:.3g} s)")
                raise ConfigError(f"checkpoint_interval={ck.interval_s:g} s is shorter than {what}; allowed: at least "
                                  f"{shortest:.3g} s")
            tau, chosen = ck.interval_s, False
        else:
            tau, chosen = _best_interval(work, stall, lam, fixed, job.iteration_time_s, shortest,
                                         lam_p * stop), True
        stall_total = work * stall / tau
    if tau is None:  # no failures to checkpoint against (planned stops may remain)
        wall = work / (1 - lam_p * stop) if lam_p * stop < 1 else math.inf
    else:
        wall = _wall(work, tau, stall, lam, fixed, lam_p * stop)
    if not math.isfinite(wall):
        mtbf_h = 1 / (lam + lam_p) / SECONDS_PER_HOUR
        lost_h = 0.0 if tau is None else ((tau + stall) / 2 + (write if ck.asynchronous else 0.0)) / SECONDS_PER_HOUR
        raise MadmaxError(f"interruptions every {mtbf_h:.3g} h on average (the profile's rates over {job.num_gpus:,} "
                          f"GPUs) come faster than the job recovers ({restart / SECONDS_PER_HOUR:.3g} h to restart "
                          f"and {lost_h:.3g} h of work lost each, half a checkpoint interval): it never finishes; "
                          "lower the rates, restart faster, checkpoint more often or use fewer GPUs")
    count, stops = lam * wall, lam_p * wall
    lost = count * ((tau + stall) / 2 + (write if ck.asynchronous else 0.0)) if tau is not None else 0.0
    return Goodput(
        tokens=tokens, profile=profile.name, ideal_s=ideal, stragglers_s=work - ideal,
        checkpoint_s=stall_total + stops * (stop - base), lost_work_s=lost, restart_s=count * restart + stops * base,
        wall_s=wall, interruptions=count + stops,
        interruptions_by_component={c: r * wall for c, r in rates.items()},
        mtbf_s=1 / lam if lam > 0 else math.inf, checkpoint_bytes=job.checkpoint_bytes, checkpoint_write_s=write,
        checkpoint_stall_s=stall if tau is not None else 0.0, checkpoint_interval_s=tau,
        checkpoint_interval_chosen=chosen, restart_each_s=restart, straggler_slowdown=slow, assumptions=assumptions,
        spare_wait_s=wait if lam_n > 0 else 0.0)


def _best_interval(work: float, stall: float, lam: float, fixed: float, iteration: float, shortest: float,
                   planned: float = 0.0) -> float:
    """The checkpoint interval, in whole iterations and at least `shortest`, that minimises the expected wall time.

    The continuous optimum solves tau^2 + 2 stall tau = 2 stall a / lam, a = 1 - lam (fixed + stall / 2) - planned;
    the whole-iteration intervals on either side of it are compared (the wall time is unimodal in tau)."""
    if lam == 0:
        return math.inf
    a = 1 - lam * (fixed + stall / 2) - planned
    best = -stall + math.sqrt(stall * stall + 2 * stall * max(a, 0.0) / lam) if stall > 0 else shortest
    least = math.ceil(shortest / iteration - 1e-9)
    k = max(best / iteration, least)
    candidates = {max(least, math.floor(k)), max(least, math.ceil(k))}
    return min((c * iteration for c in candidates), key=lambda t: _wall(work, t, stall, lam, fixed, planned))


# A GPU's copy to host memory when the system names no host link: PCIe Gen4 x16, 64 GB/s both directions / 2
# (the A100 datasheet's figure, the slowest link of the catalog's GPUs).
HOST_LINK_BYTES_PER_S = 32e9


def time_to_train(result: Any, system: Any, tokens: float, profile: Reliability) -> dict[str, Any]:
    """The `time_to_train` block of a training result (madmax.results.training.Result) on `system`: the goodput
    model's expected wall clock for `tokens` and its parts, and the GPU-hours, cost (with a price) and energy of
    it (the cluster at load for the whole wall clock)."""
    from madmax.results.cost import power_w

    host = system.host_link.bytes_per_s if system.host_link is not None else HOST_LINK_BYTES_PER_S
    job = JobState(iteration_time_s=result.iteration_time_s,
                   tokens_per_iteration=result.global_batch * result.seq_len, num_gpus=result.num_gpus,
                   gpus_per_node=system.gpus_per_node, checkpoint_bytes=result.checkpoint_bytes,
                   restore_bytes=result.restore_bytes, host_bytes_per_s=host)
    g = goodput(job, profile, tokens)
    block = g.to_dict()
    if system.host_link is None:
        block["assumptions"].append(f"{system.name} names no host link: a checkpoint's copy to host memory at "
                                    f"{HOST_LINK_BYTES_PER_S / 1e9:g} GB/s per GPU (PCIe Gen4 x16, one direction)")
    price = system.price_per_gpu_hour_usd
    gpu_hours = result.num_gpus * g.wall_s / SECONDS_PER_HOUR
    block.update({"gpu_hours": gpu_hours, "ideal_gpu_hours": result.num_gpus * g.ideal_s / SECONDS_PER_HOUR,
                  "cost_usd": None if price is None else price * gpu_hours, "energy_j": power_w(system) * g.wall_s})
    return block


def scaled(profile: Reliability, failure_rate: float = 1.0, checkpoint_bandwidth: float = 1.0,
           restart_time: float = 1.0) -> Reliability:
    """`profile` with every failure rate, both checkpoint bandwidths and the restart's times (restart, repair,
    warm-up) multiplied: the reliability what-ifs of a sweep (`madmax.sweep.whatif`)."""
    if failure_rate == checkpoint_bandwidth == restart_time == 1:
        return profile
    failures = [f.model_copy(update={"rate_per_hour": f.rate_per_hour * failure_rate}) for f in profile.failures]
    ck = profile.checkpoint.model_copy(update={
        "node_bytes_per_s": profile.checkpoint.node_bytes_per_s * checkpoint_bandwidth,
        "filesystem_bytes_per_s": profile.checkpoint.filesystem_bytes_per_s * checkpoint_bandwidth})
    rs = profile.restart.model_copy(update={k: getattr(profile.restart, k) * restart_time
                                            for k in ("restart_s", "repair_s", "warmup_s")})
    return profile.model_copy(update={"failures": failures, "checkpoint": ck, "restart": rs})
