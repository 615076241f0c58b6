"""Reinforcement-learning post-training (GRPO, PPO): one RL step's work and how its phases share the cluster.

An RL step generates `samples` responses to each of `prompts` prompts with a serving engine (the rollout),
scores them (the policy's own log-probabilities, a frozen reference policy's for the KL term, a critic's values,
a reward model's or a verifier's rewards), trains the policy (and the critic) on them in `mini_batches` optimizer
steps, and sends the new weights to the rollout engines (`madmax.rl`). The layout decides which GPUs do what:

- colocated: every GPU generates, then scores, then trains (verl's hybrid engine, OpenRLHF's colocation): the
  phases run one after another and the rollout engine's KV cache lives in the memory the training state leaves;
- disaggregated: `rollout_gpus` GPUs generate and the rest score and train (AReaL, slime, NeMo-RL's non-colocated
  mode): each pool idles while the other works, unless `asynchronous`, where step n + 1 generates beside step n's
  training with the weights one step old.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from madmax.config.base import Schema
from madmax.errors import ConfigError

# The most responses one RL step generates (prompts x samples): a step's rollout is simulated request by request.
MAX_SEQUENCES = 1_000_000


class RLLayout(StrEnum):
    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"


class RLSetup(Schema):
    """One RL step (GRPO by default: no critic, a rule or verifier reward) and its layout."""

    prompts: PositiveInt = Field(description="Prompts per RL step (verl data.train_batch_size).")
    samples: PositiveInt = Field(8, description="Responses generated per prompt (GRPO's group size, verl "
                                 "actor_rollout_ref.rollout.n).")
    layout: RLLayout = Field(RLLayout.COLOCATED, description="colocated (every GPU runs every phase, one after "
                             "another) or disaggregated (rollout_gpus generate, the rest score and train).")
    rollout_gpus: PositiveInt | None = Field(None, description="GPUs of the rollout pool (disaggregated); the "
                                             "others train.")
    rollout_tp: PositiveInt = Field(1, description="Tensor parallelism of a rollout engine; the pool's other GPUs "
                                    "run replicas of it.")
    rollout_stack: str = Field("vllm", description="Serving stack of the rollout engines (vllm, sglang, trtllm).")
    rollout_dtype: str | None = Field(None, description="Weight format of the rollout engines; default the "
                                      "training dtype.")
    reference: bool = Field(True, description="A frozen reference policy's log-probabilities (the KL term of GRPO "
                            "and PPO); false without a KL term.")
    reward_model: str | dict | None = Field(None, description="A reward model scored by a forward pass (a catalog "
                                            "model, a file or a mapping); none: a rule or verifier (no GPU work).")
    critic: bool = Field(False, description="A value model of the policy's size, scored and trained each step "
                         "(PPO); GRPO has none.")
    mini_batches: PositiveInt = Field(1, description="Optimizer steps each RL step takes over its samples (verl "
                                      "train batch / ppo_mini_batch_size).")
    asynchronous: bool = Field(False, description="Disaggregated: step n + 1 generates while step n trains, on "
                               "weights one step old (staleness 1).")
    max_response_len: PositiveInt | None = Field(None, description="Longest response (verl "
                                                 "data.max_response_length): drawn lengths are cut to it.")
    response_len_std: NonNegativeFloat = Field(0.0, description="Spread of the response lengths, tokens (a "
                                               "lognormal law of the mean and this standard deviation, cut at "
                                               "max_response_len): the longest sets the rollout's end.")

    @model_validator(mode="after")
    def _checked(self) -> RLSetup:
        if self.prompts * self.samples > MAX_SEQUENCES:
            raise ValueError(f"prompts x samples = {self.prompts * self.samples:,} responses a step; allowed: at most "
                             f"{MAX_SEQUENCES:,}")
        if self.layout is RLLayout.DISAGGREGATED and self.rollout_gpus is None:
            raise ValueError("layout=disaggregated needs rollout_gpus (the GPUs that generate; the rest train)")
        if self.layout is RLLayout.COLOCATED:
            given = [k for k in ("rollout_gpus", "asynchronous") if k in self.model_fields_set
                     and getattr(self, k) not in (None, False)]
            if given:
                raise ValueError(f"{given[0]} applies to layout=disaggregated (colocated GPUs run every phase); "
                                 "allowed: layout=disaggregated, or leave it out")
        if self.prompts * self.samples % self.mini_batches:
            raise ValueError(f"mini_batches={self.mini_batches} does not divide the {self.prompts * self.samples:,} "
                             "responses of a step; allowed: a divisor of prompts x samples")
        return self


def load_rl(spec: Any) -> RLSetup:
    """An RLSetup from a mapping, a 'key=value,...' text, a YAML/JSON file or an RLSetup; ConfigError naming the
    field otherwise."""
    from pathlib import Path

    from madmax.config.checks import is_file, path_rule
    from madmax.config.loaders import read_file, validate

    if isinstance(spec, RLSetup):
        return spec
    if spec is None:
        raise ConfigError("rl is required for task=rl: prompts (per step) at least, e.g. prompts=256,samples=8")
    if isinstance(spec, str) and is_file(spec):
        spec = read_file(Path(spec), "rl")
    elif isinstance(spec, str) and "=" not in spec and spec.strip():  # a file's name, not settings
        raise ConfigError(f"rl {spec!r} is neither key=value settings nor a file{path_rule(spec)}; allowed: e.g. "
                          "prompts=256,samples=8, or a YAML file of them")
    elif isinstance(spec, str):
        spec = _pairs(spec)
    if not isinstance(spec, dict):
        raise ConfigError("rl must be a mapping, a 'key=value,...' text or a YAML file; e.g. prompts=256,samples=8")
    return validate(RLSetup, spec, "rl")


def _pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not item.strip():
            continue
        if not sep or not key or not value.strip():
            raise ConfigError(f"rl setting {item.strip()!r} is not key=value; allowed keys: "
                              f"{', '.join(RLSetup.model_fields)}")
        if key in out:
            raise ConfigError(f"rl.{key} is given twice; allowed: each setting once")
        out[key] = value.strip()
    return out
