"""The result of one RL post-training step (`madmax.rl`): its time, what each phase took, and each pool's use."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

PHASES = ("generation", "scoring", "training", "weight_sync")


@dataclass(frozen=True)
class RLResult:
    """One RL step. `phases_s`: seconds of each phase (generation of the responses; scoring: the forward passes
    that give log-probabilities, values and rewards; training: the policy's (and critic's) optimizer steps;
    weight_sync: the new weights into the rollout engines); `passes_s`: the scoring passes one by one;
    `pools`: each pool's GPUs and the share of the step it works (1 - idle)."""

    model: str
    system: str
    num_gpus: int
    layout: str
    asynchronous: bool
    prompts: int
    samples: int
    prompt_len: int
    response_len: float  # mean of the drawn responses
    longest_response: int
    step_time_s: float
    phases_s: dict[str, float]
    passes_s: dict[str, float]
    pools: dict[str, dict[str, float]]
    rollout_strategy: str
    train_strategy: str
    rollout_stack: str
    train_stack: str
    fits: bool
    fits_reason: str | None
    generation: dict[str, Any] = field(default_factory=dict)  # the rollout's serving numbers
    training: dict[str, Any] = field(default_factory=dict)  # one optimizer step's training numbers
    assumptions: list[str] = field(default_factory=list)

    @property
    def sequences(self) -> int:
        return self.prompts * self.samples

    @property
    def samples_per_s(self) -> float:
        """Responses generated and trained on per second."""
        return self.sequences / self.step_time_s

    @property
    def tokens_per_s(self) -> float:
        """Response tokens generated per second, over the step."""
        return self.sequences * self.response_len / self.step_time_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(task="rl", sequences=self.sequences, samples_per_s=self.samples_per_s,
                   tokens_per_s=self.tokens_per_s, tokens_per_s_per_gpu=self.tokens_per_s_per_gpu)
        return out
