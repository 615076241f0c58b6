"""Typed access to the keys of one Hugging Face `config.json` mapping, shared by the dense importers
(`madmax.config.hf`) and the mixture-of-experts ones (`madmax.config.hf_moe`). Every failure is one
sentence naming the Hugging Face key, the value and what is allowed.
"""

from __future__ import annotations

from typing import Any

from madmax.errors import ConfigError

# transformers activation names (ACT2FN keys) -> our Activation values.
ACTIVATIONS = {
    "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu",
    "gelu_python": "gelu", "gelu_accurate": "gelu", "quick_gelu": "gelu",
    "relu": "relu", "silu": "silu", "swish": "silu", "relu2": "squared_relu",
}
SLIDING, FULL = "sliding_attention", "full_attention"


class HFConfig:
    """Typed access to one Hugging Face config mapping; every failure names the Hugging Face key."""

    def __init__(self, cfg: dict[str, Any], model_type: str, prefix: str = "") -> None:
        self.cfg = cfg
        self.model_type = model_type
        self.prefix = prefix  # 'text_config.' for the text model of a multimodal config

    def where(self, key: str) -> str:
        return f"Hugging Face config.json (model_type {self.model_type!r}) field {self.prefix + key!r}"

    def size(self, key: str, *aliases: str) -> int:
        """A required positive integer, under `key` or one of its older names `aliases`."""
        for name in (key, *aliases):
            if self.cfg.get(name) is not None:
                return self._positive(name)
        also = "".join(f" (or {self.prefix + a!r})" for a in aliases)
        raise ConfigError(f"{self.where(key)}{also} is missing; it is required to import this model")

    def optional_size(self, key: str, *aliases: str) -> int | None:
        return next((self._positive(name) for name in (key, *aliases) if self.cfg.get(name) is not None), None)

    def size_or(self, key: str, default: int) -> int:
        """A positive integer, or the transformers default when the config leaves the key out."""
        return self.optional_size(key) or default

    def count(self, key: str, default: int | None = None) -> int:
        """A non-negative integer (null counts as 0); `default` when the key is absent, which is an error
        when no default is given."""
        if key not in self.cfg:
            if default is None:
                raise ConfigError(f"{self.where(key)} is missing; it is required to import this model")
            return default
        value = self.cfg[key]
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{self.where(key)}={value!r} must be a non-negative integer")
        return value

    def indices(self, key: str, num_layers: int) -> list[int] | None:
        """A list of layer indices (0 to num_layers - 1), sorted; None when the key is absent or null."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers
                                              for i in value):
            raise ConfigError(f"{self.where(key)}={value!r} must be a list of layer indices from 0 to {num_layers - 1}")
        return sorted(set(value))

    def _positive(self, key: str) -> int:
        value = self.cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{self.where(key)}={value!r} must be a positive integer")
        return value

    def positive_number(self, key: str, default: float | None) -> float | None:
        """A positive number, or `default` when the config leaves the key out; None when it is null."""
        if key not in self.cfg:
            return default
        value = self.cfg[key]
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{self.where(key)}={value!r} must be a positive number")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where(key)}={value!r} must be true or false")
        return value

    def dropout(self, *keys: str, default: float = 0.0) -> bool:
        """Whether any of the dropout probabilities `keys` is positive."""
        for key in keys:
            value = self.cfg.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(f"{self.where(key)}={value!r} must be a probability in [0, 1]")
            if value > 0:
                return True
        return False

    def activation(self, key: str, default: str) -> str:
        value = self.cfg.get(key, default)
        if not isinstance(value, str) or value not in ACTIVATIONS:  # a list or mapping is not hashable
            raise ConfigError(
                f"{self.where(key)}={value!r} is not supported; allowed: {', '.join(ACTIVATIONS)}"
            )
        return ACTIVATIONS[value]

    def pretraining_length(self, max_seq_len: int) -> dict[str, int]:
        """Our train_seq_len: the context before RoPE scaling (`rope_scaling.original_max_position_embeddings`,
        8K for Llama 3.1, 4K for DeepSeek-V3 and GPT-OSS) when the config scales RoPE; else nothing."""
        scaling = self.cfg.get("rope_scaling")
        if isinstance(scaling, dict) and isinstance(scaling.get("original_max_position_embeddings"), int):
            original = scaling["original_max_position_embeddings"]
            if 0 < original <= max_seq_len:
                return {"train_seq_len": original}
        return {}

    def windows(self, window: int | None, pattern: int | None, num_layers: int) -> dict[str, Any]:
        """Our sliding_window and sliding_window_pattern: from `layer_types` (one 'sliding_attention' or
        'full_attention' per layer) when the config lists them, else `window` on the layers that the
        `pattern` k leaves local (every k-th is global; None: all local; 1: none local)."""
        types = self.cfg.get("layer_types")
        if types is not None:
            if not isinstance(types, list) or len(types) != num_layers or not set(types) <= {SLIDING, FULL}:
                raise ConfigError(f"{self.where('layer_types')} must list {SLIDING!r} or {FULL!r} for each of "
                                  f"the {num_layers} layers")
            try:
                pattern = global_every([t == FULL for t in types])
            except ValueError:
                raise ConfigError(f"{self.where('layer_types')} does not make every k-th layer full attention, "
                                  "which our sliding_window_pattern needs; allowed: a repeating pattern of "
                                  f"k-1 {SLIDING!r} then one {FULL!r}") from None
            if pattern != 1 and window is None:
                raise ConfigError(f"{self.where('layer_types')} has sliding layers but the config gives no "
                                  "sliding_window; allowed: a sliding_window, or only 'full_attention' layers")
        if window is None or pattern == 1:
            return {}
        return {"sliding_window": window, "sliding_window_pattern": pattern}


def global_every(is_global: list[bool]) -> int | None:
    """Our sliding_window_pattern k of per-layer global flags: layer i global exactly when (i + 1) % k == 0
    (1: every layer global); None: no global layer; ValueError when no k gives the flags."""
    if not any(is_global):
        return None
    k = is_global.index(True) + 1
    if any(g != ((i + 1) % k == 0) for i, g in enumerate(is_global)):
        raise ValueError("global layers are not every k-th layer")
    return k
