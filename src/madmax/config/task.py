"""What to run: pre-training, fine-tuning (full, LoRA, frozen layers) or inference."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from madmax.config.base import DType, Schema


class TaskKind(StrEnum):
    PRETRAIN = "pretrain"
    FINETUNE = "finetune"
    INFERENCE = "inference"


class FinetuneMethod(StrEnum):
    FULL = "full"
    LORA = "lora"


class Task(Schema):
    """One iteration of training (a global batch) or one inference request batch."""

    kind: TaskKind = Field(description="pretrain, finetune or inference.")
    global_batch: PositiveInt | None = Field(
        None, description="Sequences per optimizer step (training); default dp x mbs x pp."
    )
    seq_len: PositiveInt | None = Field(None, description="Tokens per training sequence; default the model's.")
    dtype: DType = Field(DType.BF16, description="Compute dtype of the GEMMs (bf16, fp16, fp8, fp32).")
    finetune: FinetuneMethod = Field(FinetuneMethod.FULL, description="Fine-tuning method (finetune only).")
    frozen_layers: NonNegativeInt = Field(
        0, description="Bottom layers (and the embedding when > 0) without gradients or optimizer state."
    )
    lora_rank: PositiveInt = Field(16, description="Rank r of LoRA adapters.")
    lora_targets: list[str] = Field(
        default_factory=lambda: ["qkv", "out"],
        description="Projections carrying LoRA adapters: qkv, out, up, gate, down.",
    )
    batch: PositiveInt | None = Field(None, description="Concurrent requests (inference).")
    prompt_len: PositiveInt | None = Field(None, description="Prompt tokens per request (inference).")
    output_len: PositiveInt | None = Field(None, description="Generated tokens per request (inference).")

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Task:
        allowed_dtypes = {DType.BF16, DType.FP16, DType.FP8, DType.FP32}
        if self.dtype not in allowed_dtypes:
            raise ValueError(f"dtype={self.dtype} is not a compute dtype; allowed: bf16, fp16, fp8, fp32")
        if self.kind is not TaskKind.FINETUNE and (self.frozen_layers or self.finetune is not FinetuneMethod.FULL):
            raise ValueError("finetune and frozen_layers apply only to task kind 'finetune'")
        bad = sorted(set(self.lora_targets) - LORA_TARGETS)
        if bad:
            raise ValueError(f"lora_targets has {bad[0]!r}; allowed: {', '.join(sorted(LORA_TARGETS))}")
        return self


LORA_TARGETS = {"qkv", "out", "up", "gate", "down"}
