"""What to run: pre-training, fine-tuning (full, LoRA, frozen layers) or inference (serving)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from madmax.config.base import DType, Schema, dtype_among
from madmax.config.checks import MAX_FLOAT, MAX_GLOBAL_BATCH, shown
from madmax.config.stack import Launch
from madmax.errors import ConfigError


class TaskKind(StrEnum):
    PRETRAIN = "pretrain"
    FINETUNE = "finetune"
    INFERENCE = "inference"


class FinetuneMethod(StrEnum):
    FULL = "full"
    LORA = "lora"


class ServingMode(StrEnum):
    """How requests reach a serving deployment (see `madmax.serve`).

    STATIC: `batch` requests start together and finish together (static batching).
    CONCURRENCY: closed loop, `batch` requests in flight per replica, each finished one replaced at once.
    SATURATION: every request queued; the batch that maximizes throughput within memory is found.
    RATE: requests arrive at `request_rate` (Poisson) or as listed in a CSV (`arrivals`); latency percentiles
    and goodput.
    DISAGGREGATED: separate prefill and decode workers, the KV cache sent between them.
    """

    STATIC = "static"
    CONCURRENCY = "concurrency"
    SATURATION = "saturation"
    RATE = "rate"
    DISAGGREGATED = "disaggregated"


Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Tokens = Annotated[float, Field(ge=0, allow_inf_nan=False)]


MAX_REQUESTS = 10_000_000  # requests a serving simulation takes (memory of its request arrays)
# Latest arrival a serving simulation takes, seconds (~32 years): beyond it the float64 clock's spacing
# (2.2e-16 t) grows past a microsecond and a step added to the clock can vanish.
MAX_ARRIVAL_S = 1e9
# Slowest Poisson arrival rate: its mean gap, 1000 s, times MAX_REQUESTS stays within ten horizons.
MIN_REQUEST_RATE = 1e-3


class Speculative(StrEnum):
    """How a serving engine drafts the tokens its step verifies."""

    NGRAM = "ngram"
    EAGLE = "eagle"
    MTP = "mtp"
    DRAFT = "draft"


# Most tokens a speculative step drafts (engines take a handful: vLLM's examples 1-7, EAGLE's trees up to ~60
# nodes, chains of under 10).
MAX_DRAFT_LEN = 16
# DeepSeek-V3's MTP module as its report measures it: one drafted token (depth 1), accepted 85-90% of the time
# ("the acceptance rate of the second token prediction ranges between 85% and 90%", arXiv 2412.19437, Sec. 5.4.3);
# the low end.
MTP_DEFAULT_DRAFT = 1
MTP_DEFAULT_ACCEPTANCE = 0.85


class Task(Schema):
    """One iteration of training (a global batch) or one inference request batch."""

    kind: TaskKind = Field(description="pretrain, finetune or inference.")
    global_batch: PositiveInt | None = Field(
        None, le=MAX_GLOBAL_BATCH, description="Sequences per optimizer step (training); default dp x mbs x pp; at "
        "most 2**31 - 1 (the search holds micro-batch sizes as 32-bit integers)."
    )
    seq_len: PositiveInt | None = Field(None, description="Tokens per training sequence; default the model's.")
    dtype: DType = Field(DType.BF16, description="Compute dtype of the GEMMs (bf16, fp16, fp8, fp32, tf32; mxfp8 and "
                                                 "fp4 alias nvfp4 on Blackwell; for inference also int8 (W8A8), "
                                                 "int4 weight-only (AWQ, GPTQ) and mxfp4 weights).")
    finetune: FinetuneMethod = Field(FinetuneMethod.FULL, description="Fine-tuning method (finetune only).")
    frozen_layers: NonNegativeInt = Field(
        0, description="Bottom layers (and the embedding when > 0) without gradients or optimizer state."
    )
    lora_rank: PositiveInt = Field(16, description="Rank r of LoRA adapters.")
    lora_targets: list[str] = Field(
        default_factory=lambda: ["qkv", "out"],
        description="Projections carrying LoRA adapters: qkv, out, up, gate, down.",
    )
    batch: PositiveInt | None = Field(
        None, le=MAX_REQUESTS,
        description="Requests served at once per replica (inference; the largest tried in saturation mode).")
    prompt_len: PositiveInt | None = Field(None, description="Prompt tokens per request (inference).")
    output_len: PositiveInt | None = Field(None, description="Generated tokens per request (inference).")
    prompt_len_std: Tokens = Field(0.0, description="Standard deviation of the prompt tokens (inference): each "
                                   "request's drawn from a normal of mean prompt_len, as aiperf's --isl-stddev; "
                                   "0: every prompt prompt_len tokens.")
    output_len_std: Tokens = Field(0.0, description="Standard deviation of the generated tokens (inference), as "
                                   "aiperf's --osl-stddev; 0: every request output_len tokens.")
    mode: ServingMode = Field(ServingMode.STATIC, description="Serving mode (inference): static, concurrency, "
                                                              "saturation, rate or disaggregated.")
    kv_dtype: DType | None = Field(None, description="Format of the KV cache (inference): bf16, fp16 or fp8; "
                                                     "default the 16-bit activation format.")
    request_rate: Positive | None = Field(None, ge=MIN_REQUEST_RATE, description="Requests per second arriving at "
                                          "the deployment (rate mode; Poisson arrivals), at least 0.001.")
    num_requests: PositiveInt | None = Field(
        None, le=MAX_REQUESTS, description="Requests simulated (rate, concurrency and disaggregated modes).")
    arrivals: str | None = Field(None, description="CSV of requests (rate mode): columns arrival_s, prompt_len, "
                                                "output_len; replaces request_rate, prompt_len and output_len.")
    max_ttft_s: Positive | None = Field(None, description="Time-to-first-token limit for goodput and the "
                                                          "serving search, seconds.")
    max_tpot_s: Positive | None = Field(None, description="Time-per-output-token limit for goodput and the "
                                                          "serving search, seconds.")
    seed: NonNegativeInt = Field(0, description="Seed of the Poisson arrivals (rate mode).")
    prefix_len: NonNegativeInt = Field(0, description="Prompt tokens every request shares (a system prompt; "
                                       "inference): with prefix caching an engine keeps their KV cache once and "
                                       "prefills only the rest of a prompt; 0: none shared.")
    prefix_hit: float = Field(1.0, ge=0, le=1, description="Share of the requests whose shared prefix an engine "
                              "finds cached once it holds it (0-1; the others prefill their whole prompt).")
    speculative: Speculative | None = Field(None, description="Speculative decoding (inference): ngram (drafts "
                                            "from the context, no GPU work), eagle (a one-layer draft head), mtp "
                                            "(the model's multi-token-prediction modules) or draft (a smaller model, "
                                            "draft_model).")
    draft_model: str | dict | None = Field(None, description="The draft model of speculative=draft: a catalog "
                                           "model, a file or a mapping, smaller than the served model and with its "
                                           "vocabulary (e.g. llama-3.2-1b for llama-3.1-70b).")
    draft_len: PositiveInt | None = Field(None, le=MAX_DRAFT_LEN, description="Tokens drafted a step, k "
                                          "(speculative decoding; mtp default 1).")
    acceptance: float | None = Field(None, ge=0, le=1, description="Chance that each drafted token is accepted, "
                                     "alpha, independently (speculative decoding; mtp default 0.85).")
    launch: Launch = Field(Launch.SIZED, description="How the serving engine is launched (inference): engine (its "
                           "defaults), sized (the defaults, raised where they cannot serve the load; default) or "
                           "aiconfigurator (the settings AIConfigurator's generator writes).")
    engine: str | None = Field(None, description="Engine settings over the stack and the launch (inference), e.g. "
                               "'max_num_tokens=16384,chunked_prefill=1'.")
    expert_load: str = Field("balanced", description="How routing loads the expert ranks (MoE models): "
                             "balanced, a measured busiest-over-mean factor such as 1.3, or zipf:ALPHA.")
    capacity_factor: float | None = Field(None, description="Expert capacity over the mean share; tokens beyond "
                                          "it are dropped (MoE models); default none: dropless.")

    @field_validator("expert_load", mode="before")
    @classmethod
    def _expert_load(cls, value: object) -> object:
        parse_expert_load(value if isinstance(value, str | int | float) else str(value))
        return str(value)

    @field_validator("capacity_factor")
    @classmethod
    def _capacity(cls, value: float | None) -> float | None:
        parse_expert_load(None, value)
        return value

    @property
    def routing(self) -> ExpertLoad:
        """The expert load of `expert_load` and `capacity_factor`."""
        return parse_expert_load(self.expert_load, self.capacity_factor)

    @field_validator("dtype", mode="before")
    @classmethod
    def _compute_dtype(cls, value: object) -> object:
        return dtype_among(value, COMPUTE_DTYPES + INFERENCE_ONLY_DTYPES, "a compute")

    @field_validator("kv_dtype", mode="before")
    @classmethod
    def _kv_dtype(cls, value: object) -> object:
        return None if value is None else dtype_among(value, KV_DTYPES, "a KV-cache")

    def _given(self, name: str) -> bool:
        """Whether field `name` was given a value other than its default."""
        return name in self.model_fields_set and getattr(self, name) != type(self).model_fields[name].get_default()

    def _nothing_ignored(self) -> None:
        """Refuse serving fields that the mode would not use (nothing a user asks for is silently dropped)."""
        if self.arrivals is not None:
            for name in ("request_rate", "num_requests", "prompt_len", "output_len"):
                if self._given(name):
                    raise ValueError(f"task.{name} does not apply beside task.arrivals, whose CSV lists each "
                                     "request's arrival, prompt and output lengths; allowed: one of the two")
        if self.mode is ServingMode.STATIC and self._given("num_requests"):
            raise ValueError("task.num_requests does not apply to mode static, which serves one batch of "
                             "task.batch requests; allowed: another mode (concurrency, saturation, rate)")
        if self.prefix_len and self.prompt_len is not None and self.prefix_len >= self.prompt_len:
            raise ValueError(f"task.prefix_len={self.prefix_len} is not shorter than prompt_len={self.prompt_len}; "
                             "allowed: a shared prefix shorter than the prompt (0 for none)")
        if self._given("prefix_hit") and not self.prefix_len:
            raise ValueError("task.prefix_hit is the share of requests that find the shared prefix cached; allowed: "
                             "give prefix_len too")
        if self.prefix_len and self.mode is ServingMode.DISAGGREGATED:
            raise ValueError("task.prefix_len is modelled on aggregated engines; allowed: modes static, "
                             "concurrency, saturation, rate")
        self._speculative_fields()
        self._length_spread()
        if self._given("seed") and self.request_rate is None and not self.spread:
            raise ValueError("task.seed draws Poisson arrivals or request lengths, which only a request_rate or a "
                             "prompt_len_std / output_len_std has; allowed: one of those with seed, or no seed")

    @property
    def spread(self) -> bool:
        """Whether request lengths are drawn (a prompt_len_std or output_len_std above 0)."""
        return self.prompt_len_std > 0 or self.output_len_std > 0

    def _length_spread(self) -> None:
        """Drawn lengths need a mode that serves requests one by one, and no other source of lengths."""
        given = [n for n in ("prompt_len_std", "output_len_std") if self._given(n)]
        if not given:
            return
        if self.arrivals is not None:
            raise ValueError(f"task.{given[0]} does not apply beside task.arrivals, whose CSV lists each request's "
                             "lengths; allowed: one of the two")
        if self.mode is ServingMode.STATIC:
            raise ValueError(f"task.{given[0]} draws each request's length, but mode static serves one batch of one "
                             "prompt and output length; allowed: modes concurrency, saturation, rate, disaggregated")
        if self.prefix_len:
            raise ValueError(f"task.{given[0]} with task.prefix_len: a drawn prompt can be shorter than the shared "
                             "prefix; allowed: one of the two")

    def _speculative_fields(self) -> None:
        """Speculative decoding's draft length and acceptance: mtp takes DeepSeek-V3's (1, 0.85) by default;
        ngram and eagle depend on the workload and the head, so both are asked for; neither applies without it."""
        if self.speculative is None:
            given = [n for n in ("draft_len", "acceptance", "draft_model") if getattr(self, n) is not None]
            if given:
                raise ValueError(f"task.{given[0]} applies to speculative decoding; allowed: give speculative "
                                 "(ngram, eagle, mtp, draft) too")
            return
        if (self.draft_model is None) == (self.speculative is Speculative.DRAFT):
            raise ValueError("task.speculative=draft needs task.draft_model (the smaller model that drafts)"
                             if self.draft_model is None else
                             f"task.draft_model applies to speculative=draft, not {self.speculative.value}; "
                             "allowed: speculative=draft with it, or leave it out")
        if self.mode is ServingMode.DISAGGREGATED:
            raise ValueError("task.speculative is modelled on aggregated engines; allowed: modes static, "
                             "concurrency, saturation, rate")
        missing = [n for n in ("draft_len", "acceptance") if getattr(self, n) is None]
        if missing and self.speculative is not Speculative.MTP:
            raise ValueError(f"task.speculative={self.speculative.value} needs task.{missing[0]} (it depends on the "
                             "workload and the drafter); allowed: draft_len 1-16 and acceptance 0-1")

    @property
    def tokens_per_step(self) -> float:
        """Tokens a decoding request gains per speculative step on average: (1 - a^(k+1)) / (1 - a) for k drafted
        tokens each accepted with chance a until the first rejection, plus the verifier's own token (Leviathan
        et al. 2023, arXiv 2211.17192, eq. 1); 1 without speculative decoding."""
        if self.speculative is None:
            return 1.0
        a, k = self.drafting
        return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)

    @property
    def drafting(self) -> tuple[float, int]:
        """(acceptance, draft length) of speculative decoding, mtp's defaults where not given."""
        mtp = self.speculative is Speculative.MTP
        a = self.acceptance if self.acceptance is not None else (MTP_DEFAULT_ACCEPTANCE if mtp else 0.0)
        k = self.draft_len if self.draft_len is not None else (MTP_DEFAULT_DRAFT if mtp else 1)
        return float(a), int(k)

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Task:
        bad = sorted(set(self.lora_targets) - LORA_TARGETS)
        if bad:
            raise ValueError(f"lora_targets has {bad[0]!r}; allowed: {', '.join(sorted(LORA_TARGETS))}")
        given = self.model_fields_set
        if self.kind is not TaskKind.FINETUNE:
            for name in ("frozen_layers", "finetune", "lora_rank", "lora_targets"):
                if name in given and getattr(self, name) != type(self).model_fields[name].get_default(
                        call_default_factory=True):
                    raise ValueError(f"task.{name} applies only to task kind 'finetune', not {self.kind.value!r}")
        elif self.finetune is FinetuneMethod.FULL and {"lora_rank", "lora_targets"} & given:
            raise ValueError("task.lora_rank and task.lora_targets apply only to finetune method 'lora'")
        if self.kind is not TaskKind.INFERENCE:
            for name in SERVING_FIELDS:
                if self._given(name):
                    raise ValueError(f"task.{name} applies only to task kind 'inference', not {self.kind.value!r}")
        elif self.mode is ServingMode.RATE and self.request_rate is None and self.arrivals is None:
            raise ValueError("task.mode=rate needs a request_rate (requests/s) or an arrivals CSV; allowed: "
                             "request_rate > 0 or arrivals=FILE")
        elif self.request_rate is not None and self.mode not in (ServingMode.RATE, ServingMode.DISAGGREGATED):
            raise ValueError(f"task.request_rate applies to modes rate and disaggregated, not {self.mode.value!r}")
        elif self.arrivals is not None and self.mode is not ServingMode.RATE:
            raise ValueError(f"task.arrivals applies to mode rate, not {self.mode.value!r}")
        if self.kind is TaskKind.INFERENCE:
            self._nothing_ignored()
        if self.kind is not TaskKind.INFERENCE and self.dtype.value in INFERENCE_ONLY_DTYPES:
            raise ValueError(f"task.dtype={self.dtype.value} applies to inference (quantized weights); "
                             f"allowed for {self.kind.value}: {', '.join(COMPUTE_DTYPES)}")
        if self.kind is TaskKind.INFERENCE and self.dtype.value in TRAINING_ONLY_DTYPES:
            allowed = [d for d in COMPUTE_DTYPES + INFERENCE_ONLY_DTYPES if d not in TRAINING_ONLY_DTYPES]
            raise ValueError(f"task.dtype={self.dtype.value} is a training recipe (block-scaled fp8 casts); allowed "
                             f"for inference: {', '.join(allowed)}")
        return self


@dataclass(frozen=True)
class ExpertLoad:
    """How routing loads the expert ranks (MoE models): 'balanced', a measured busiest-over-mean factor,
    or a power law 'zipf:alpha'; with an optional capacity factor that drops what exceeds it.

    Balanced routing (auxiliary-loss or bias balancing, or Megatron-Bridge's force-balanced benchmark
    runs) gives every rank the mean. A measured skew is the busiest rank's rows over the mean; a power
    law gives expert i (by popularity) a share proportional to (i + 1)^-alpha, the experts of a rank
    contiguous as Megatron places them. A capacity factor c caps each expert at c times its mean rows
    and drops the rest (`--moe-expert-capacity-factor`): the busiest rank does at most c times the mean.
    """

    kind: str = "balanced"
    value: float = 1.0
    capacity_factor: float | None = None

    def factor(self, num_experts: int, ep: int) -> float:
        """Rows of the busiest of the ep ranks over the mean, after the capacity cap."""
        if self.kind == "zipf":
            shares = [(i + 1) ** -self.value for i in range(num_experts)]
            local = num_experts // ep
            per_rank = [sum(shares[r * local:(r + 1) * local]) for r in range(ep)]
            load = max(per_rank) / (sum(per_rank) / ep)
        else:
            load = self.value
        return load if self.capacity_factor is None else min(load, self.capacity_factor)

    def describe(self) -> str:
        text = {"balanced": "balanced", "measured": f"{self.value:g}x the mean",
                "zipf": f"power law alpha={self.value:g}"}[self.kind]
        return text + (f", capacity factor {self.capacity_factor:g}" if self.capacity_factor else "")


def parse_expert_load(text: str | float | None, capacity_factor: float | None = None) -> ExpertLoad:
    """'balanced' (default), a number >= 1 (the busiest rank's rows over the mean, measured), or
    'zipf:ALPHA' (finite ALPHA > 0); ConfigError naming the field otherwise."""
    finite = isinstance(capacity_factor, int | float) and 1 <= capacity_factor <= MAX_FLOAT
    if capacity_factor is not None and not finite:
        raise ConfigError(f"task.capacity_factor={shown(capacity_factor)} must be a finite number >= 1 (tokens an "
                          "expert takes over its mean share before dropping); allowed: e.g. 1.0, 1.25, or none "
                          "(dropless)")
    cap = None if capacity_factor is None else float(capacity_factor)
    if text is None or text == "balanced":
        return ExpertLoad(capacity_factor=cap)
    allowed = ("allowed: balanced, a number >= 1 (busiest expert rank's tokens over the mean), or zipf:ALPHA "
               "with ALPHA > 0")
    if isinstance(text, str) and text.startswith("zipf:"):
        try:
            alpha = float(text.removeprefix("zipf:"))
        except ValueError:
            alpha = -1.0
        if not alpha > 0 or math.isinf(alpha):
            raise ConfigError(f"task.expert_load={shown(text)} has no positive power-law exponent; {allowed}")
        return ExpertLoad("zipf", alpha, cap)
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"task.expert_load={shown(text)} is not understood; {allowed}") from None
    if not 1 <= value <= MAX_FLOAT:
        raise ConfigError(f"task.expert_load={shown(text)} must be a finite number >= 1 (the busiest rank cannot get "
                          f"less than the mean); {allowed}")
    return ExpertLoad("measured", value, cap)


LORA_TARGETS = {"qkv", "out", "up", "gate", "down"}
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32", "mxfp8", "fp4")
# Inference only: int8 W8A8 (SmoothQuant: int8 weights and per-token int8 activations on int8 tensor cores), int4
# weight-only (AWQ/GPTQ, into 16-bit GEMMs) and MXFP4 weights (W4A8 where the GPU has MXFP8 tensor cores, else
# weight-only): the serving formats of `madmax.request.gemm_format` and catalog serving.yaml weight_formats.
INFERENCE_ONLY_DTYPES = ("int8", "int4", "mxfp4")
# Training only: MXFP8 (Blackwell block-scaled fp8, a Transformer Engine training recipe).
TRAINING_ONLY_DTYPES = ("mxfp8",)
KV_DTYPES = ("bf16", "fp16", "fp8")
SERVING_FIELDS = ("batch", "prompt_len", "output_len", "prompt_len_std", "output_len_std", "mode", "kv_dtype",
                  "request_rate", "num_requests", "arrivals",
                  "max_ttft_s", "max_tpot_s", "seed", "launch", "engine", "prefix_len", "prefix_hit", "speculative",
                  "draft_len", "acceptance", "draft_model")
