"""The RL layouts of one step, each simulated (`madmax search --task rl`, `madmax.search_rl`).

Which layout is fastest depends on the step: a long tail of response lengths leaves a colocated cluster
generating at a small batch while nothing trains, which a disaggregated, asynchronous layout hides behind the
training of the step before; a heavy training step leaves a colocated rollout engine little KV cache. The search
answers it by simulating every candidate (`simulate_rl`), not by a rule:

    colocated       every rollout tensor parallelism (powers of two up to a node, dividing the GPUs)
    disaggregated   every split of the GPUs into a rollout and a training pool (each at most one node or whole
                    nodes; past eight nodes, the rollout pool at each eighth of the nodes) x every rollout
                    tensor parallelism dividing its pool x synchronous and asynchronous (one step off)

A setting the `rl` setup states (layout, rollout_gpus, rollout_tp, asynchronous) fixes that axis. The training
strategy of each pool size is the training search's best for the step's optimizer step (`search.api.find`, task
finetune, one mini-batch of the step's samples at its mean sequence length) unless `strategy` fixes it; the
scoring passes run at it. Candidates are ranked by step time (the samples per step are the same for all), those
that fit first; a candidate simulate_rl refuses is kept with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from madmax.config.loaders import load_model, load_system
from madmax.config.rl import RLLayout, RLSetup, load_rl
from madmax.errors import ConfigError, MadmaxError
from madmax.results.rl import RLResult
from madmax.rl import simulate_rl, split_pools, step_shape

SPLITS = 8  # past this many nodes, the rollout pool takes each eighth of them (1/8 .. 7/8), not every node count


@dataclass(frozen=True)
class Candidate:
    """One RL layout: its pools, the rollout engines' tensor parallelism and whether steps overlap."""

    layout: RLLayout
    rollout_gpus: int
    rollout_tp: int
    asynchronous: bool

    def setup(self, base: RLSetup) -> RLSetup:
        update: dict[str, Any] = {"layout": self.layout, "rollout_tp": self.rollout_tp,
                                  "asynchronous": self.asynchronous,
                                  "rollout_gpus": None if self.layout is RLLayout.COLOCATED else self.rollout_gpus}
        return RLSetup.model_validate({**base.model_dump(), **update})

    def describe(self, num_gpus: int) -> str:
        if self.layout is RLLayout.COLOCATED:
            return f"colocated, rollout tp{self.rollout_tp}"
        return (f"{self.rollout_gpus} rollout (tp{self.rollout_tp}) + {num_gpus - self.rollout_gpus} train"
                + (", async" if self.asynchronous else ""))


@dataclass
class RLSearch:
    """Every candidate layout of one RL step: `ranked` the simulated results, fastest first (fitting ones first);
    `refused` the candidates that cannot run, each with its one-sentence reason; `train_strategies` the training
    strategy each training pool size ran."""

    model: str
    system: str
    num_gpus: int
    setup: RLSetup
    ranked: list[tuple[Candidate, RLResult]]
    refused: list[tuple[Candidate, str]]
    train_strategies: dict[int, str] = field(default_factory=dict)

    @property
    def best(self) -> tuple[Candidate, RLResult] | None:
        fitting = [pair for pair in self.ranked if pair[1].fits]
        return fitting[0] if fitting else None

    def rows(self) -> list[dict[str, Any]]:
        """One record per candidate: its layout, its step and phases; refused ones with their reason."""
        out = []
        for rank, (c, r) in enumerate(self.ranked, 1):
            out.append({"rank": rank, **_candidate_record(c, self.num_gpus), "train_strategy": r.train_strategy,
                        "step_time_s": r.step_time_s, "samples_per_s": r.samples_per_s,
                        "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
                        **{f"{phase}_s": t for phase, t in r.phases_s.items()},
                        **{f"{pool}_busy": p["busy_fraction"] for pool, p in r.pools.items()},
                        "fits": r.fits, "reason": r.fits_reason})
        for c, reason in self.refused:
            out.append({"rank": None, **_candidate_record(c, self.num_gpus), "fits": False, "reason": reason})
        return out

    def to_frame(self):
        import pandas as pd

        frame = pd.DataFrame(self.rows())
        frame.attrs.update(model=self.model, system=self.system, num_gpus=self.num_gpus,
                           candidates=len(self.ranked) + len(self.refused), refused=len(self.refused),
                           train_strategies={str(k): v for k, v in self.train_strategies.items()})
        return frame

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        shown = self.ranked[:top] if top else self.ranked
        return {"task": "rl", "model": self.model, "system": self.system, "num_gpus": self.num_gpus,
                "candidates": len(self.ranked) + len(self.refused),
                "train_strategies": {str(k): v for k, v in self.train_strategies.items()},
                "results": [{**_candidate_record(c, self.num_gpus), **r.to_dict()} for c, r in shown],
                "refused": [{**_candidate_record(c, self.num_gpus), "reason": why} for c, why in self.refused]}


def _candidate_record(c: Candidate, num_gpus: int) -> dict[str, Any]:
    return {"layout": c.layout.value, "rollout_gpus": c.rollout_gpus,
            "train_gpus": num_gpus if c.layout is RLLayout.COLOCATED else num_gpus - c.rollout_gpus,
            "rollout_tp": c.rollout_tp, "asynchronous": c.asynchronous, "candidate": c.describe(num_gpus)}


def candidates(setup: RLSetup, num_gpus: int, gpus_per_node: int, stated: set[str]) -> list[Candidate]:
    """The layouts searched (module docstring); an axis `stated` in the setup is held at the setup's value."""
    layouts = [setup.layout] if "layout" in stated else list(RLLayout)  # rollout_gpus and asynchronous need it
    out = []
    for layout in layouts:
        if layout is RLLayout.COLOCATED:
            pools = [num_gpus]
        elif "rollout_gpus" in stated:
            pools = [setup.rollout_gpus or 0]
        else:
            pools = _splits(num_gpus, gpus_per_node)
        for pool in pools:
            tps = [setup.rollout_tp] if "rollout_tp" in stated else _powers_of_two(pool, gpus_per_node)
            steps = ([False] if layout is RLLayout.COLOCATED
                     else [setup.asynchronous] if "asynchronous" in stated else [False, True])
            out += [Candidate(layout, pool, tp, a) for tp in tps for a in steps]
    return out


def _splits(num_gpus: int, node: int) -> list[int]:
    """Rollout pool sizes: every one within a node; whole-node splits of a larger cluster (each eighth of the
    nodes past SPLITS nodes)."""
    if num_gpus <= node:
        return list(range(1, num_gpus))
    nodes = num_gpus // node
    counts = range(1, nodes) if nodes <= SPLITS else sorted({max(1, min(nodes - 1, round(nodes * k / SPLITS)))
                                                              for k in range(1, SPLITS)})
    return [k * node for k in counts]


def _powers_of_two(pool: int, node: int) -> list[int]:
    return [tp for tp in (1, 2, 4, 8, 16, 32, 64) if tp <= min(pool, node) and pool % tp == 0]


def find_rl(model: Any, system: Any, num_gpus: int | None = None, rl: Any = None, *, prompt_len: int,
            response_len: int, dtype: str | None = None, strategy: str | None = None, stack: Any = None,
            calibration: Any = None) -> RLSearch:
    """Every RL layout of the step `rl` describes (see the module docstring), each simulated; raises
    `MadmaxError` on bad input (the step's own settings are checked as `simulate_rl` checks them)."""
    from madmax.terminal import advance, expect

    setup = load_rl(rl)
    stated = set(setup.model_fields_set)
    spec = load_model(model)
    cluster = load_system(system, num_gpus)
    n = cluster.cluster_gpus
    if n < 2 and setup.layout is RLLayout.DISAGGREGATED:
        raise ConfigError("layout=disaggregated needs at least 2 GPUs: a rollout and a training pool")
    found = candidates(setup, n, cluster.gpus_per_node, stated)
    strategies: dict[int, str | ConfigError] = {}

    def train_strategy(pool: int) -> str:
        if strategy is not None:
            return strategy
        if pool not in strategies:
            strategies[pool] = _best_training(spec, cluster, pool, setup, prompt_len, response_len, dtype, stack,
                                              calibration)
        chosen = strategies[pool]
        if isinstance(chosen, ConfigError):
            raise chosen
        return chosen

    expect(len(found))
    ranked: list[tuple[Candidate, RLResult]] = []
    refused: list[tuple[Candidate, str]] = []
    for c in found:
        try:
            layout = c.setup(setup)
            _, train_pool = split_pools(layout, n, cluster.gpus_per_node)
            result = simulate_rl(spec, cluster, n, layout, prompt_len=prompt_len, response_len=response_len,
                                 dtype=dtype, strategy=train_strategy(train_pool), stack=stack,
                                 calibration=calibration)
            ranked.append((c, result))
        except MadmaxError as exc:
            refused.append((c, str(exc)))
        advance()
    if not ranked:  # no layout runs: the reason, or the first one's
        reasons = {why for _, why in refused}
        raise ConfigError(reasons.pop() if len(reasons) == 1 else f"no RL layout runs; {refused[0][0].describe(n)}: "
                          f"{refused[0][1]}")
    ranked.sort(key=lambda pair: (not pair[1].fits, pair[1].step_time_s))
    shown = {k: v for k, v in strategies.items() if isinstance(v, str)}
    return RLSearch(spec.name, cluster.name, n, setup, ranked, refused, shown)


def _best_training(spec: Any, cluster: Any, pool: int, setup: RLSetup, prompt_len: int, response_len: int,
                   dtype: str | None, stack: Any, calibration: Any) -> str | ConfigError:
    """The training search's best strategy for one optimizer step of the RL step on `pool` GPUs, or why none."""
    from madmax.search.api import find

    _, seq_len = step_shape(setup, spec, prompt_len, response_len)
    batch = setup.prompts * setup.samples // setup.mini_batches
    try:
        outcome = find(spec, load_system(cluster, pool), pool, "finetune", batch, seq_len, dtype, top=1, stack=stack,
                       calibration=calibration)
    except MadmaxError as exc:
        return ConfigError(f"training on {pool} GPUs: {exc}")
    best = outcome.top(1)
    if not best:
        return ConfigError(f"training on {pool} GPUs: no strategy fits a step of {batch:,} samples of {seq_len:,} "
                           "tokens")
    return outcome.strategy(best[0])


def search_rl(model: Any, system: Any, num_gpus: int | None = None, rl: Any = None, **options: Any):
    """`find_rl` as a pandas DataFrame, one row per candidate layout, fastest first (refused ones last, with their
    reason); `df.attrs` holds the model, system, GPUs, candidate counts and each pool size's training strategy."""
    return find_rl(model, system, num_gpus, rl, **options).to_frame()
