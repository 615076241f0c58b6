"""Request lengths of the serving modes: fixed, or drawn per request from a normal distribution."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Lengths:
    """Prompt and output tokens of the requests a mode generates: `prompt` and `output` each, or, with a
    standard deviation, drawn per request from a normal distribution of that mean, as aiperf and genai-perf
    make synthetic requests from --isl/--isl-stddev and --osl/--osl-stddev. Draws are rounded and kept within
    [1, mean + TRUNCATE_SIGMAS x std] (a draw outside is drawn again: a truncated normal, so the longest request
    is known before any is drawn). Seeded, and prompt and output from streams of their own: the first k
    requests of a draw of n are those of a draw of k."""

    prompt: int
    output: int
    prompt_std: float = 0.0
    output_std: float = 0.0
    seed: int = 0

    @property
    def spread(self) -> bool:
        return self.prompt_std > 0 or self.output_std > 0

    @property
    def longest(self) -> tuple[int, int]:
        """The most prompt and output tokens a request can be given."""
        return _upper(self.prompt, self.prompt_std), _upper(self.output, self.output_std)

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Prompt and output tokens of n requests (integer arrays)."""
        return (_truncated_normal(self.prompt, self.prompt_std, n, (self.seed, 0)),
                _truncated_normal(self.output, self.output_std, n, (self.seed, 1)))


TRUNCATE_SIGMAS = 4  # a request is at most mean + 4 std tokens long (6e-5 of a normal lies beyond)


def _upper(mean: int, std: float) -> int:
    return int(mean + math.floor(TRUNCATE_SIGMAS * std)) if std > 0 else int(mean)


def _truncated_normal(mean: int, std: float, n: int, seed: tuple[int, int]) -> np.ndarray:
    """n integers drawn from N(mean, std^2), rounded, each drawn again until within [1, `_upper`]."""
    if std <= 0:
        return np.full(n, int(mean), dtype=np.int64)
    rng = np.random.default_rng(seed)
    hi = _upper(mean, std)
    out = np.rint(rng.normal(mean, std, n)).astype(np.int64)
    bad = (out < 1) | (out > hi)
    while bad.any():  # each pass keeps at least half of what is left (mean >= 1 lies inside the bounds)
        out[bad] = np.rint(rng.normal(mean, std, int(bad.sum()))).astype(np.int64)
        bad = (out < 1) | (out > hi)
    return out
