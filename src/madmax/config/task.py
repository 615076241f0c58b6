"""What to run: pre-training, fine-tuning (full, LoRA, frozen layers) or inference."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from madmax.config.base import DType, Schema, dtype_among


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
    dtype: DType = Field(DType.BF16, description="Compute dtype of the GEMMs (bf16, fp16, fp8, fp32, tf32).")
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

    @field_validator("dtype", mode="before")
    @classmethod
    def _compute_dtype(cls, value: object) -> object:
        return dtype_among(value, COMPUTE_DTYPES, "a compute")

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
            for name in ("batch", "prompt_len", "output_len"):
                if getattr(self, name) is not None:
                    raise ValueError(f"task.{name} applies only to task kind 'inference', not {self.kind.value!r}")
        return self


LORA_TARGETS = {"qkv", "out", "up", "gate", "down"}
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32")
