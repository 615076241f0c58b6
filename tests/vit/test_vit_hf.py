"""Hugging Face `ViTConfig` (model_type 'vit') import: google/vit-base-patch16-224's shape gives timm's
count; missing or bad keys fail in one sentence naming the Hugging Face key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from madmax.config.loaders import load_model
from madmax.errors import ConfigError
from madmax.workload import param_counts

# The keys of google/vit-base-patch16-224's config.json that shape the model (ViTForImageClassification,
# 1000 ImageNet labels in id2label; the label names are placeholders here).
VIT_BASE = {
    "architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "image_size": 224, "patch_size": 16,
    "num_channels": 3, "qkv_bias": True, "layer_norm_eps": 1e-12, "encoder_stride": 16,
    "id2label": {str(i): f"class {i}" for i in range(1000)},
}


def test_vit_base_imports_to_the_catalog_entry(tmp_path: Path) -> None:
    folder = tmp_path / "vit-base-patch16-224"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(VIT_BASE))
    model = load_model(str(folder / "config.json"))
    assert model.family == "vit" and model.seq_len == 197 and model.num_classes == 1000
    assert sum(param_counts(model).values()) == 86_567_656  # = vit-b/16, timm's 86.6 M
    assert param_counts(model) == param_counts(load_model("vit-b/16"))


def test_labels_default_to_transformers_two_and_qkv_bias_is_read() -> None:
    cfg = {k: v for k, v in VIT_BASE.items() if k != "id2label"} | {"qkv_bias": False}
    model = load_model(cfg)
    # 2 labels: head 768*2 + 2; no QKV biases: 12 * 2304 fewer
    assert model.num_classes == 2
    assert sum(param_counts(model).values()) == 86_567_656 - 769_000 + 1_538 - 12 * 2_304


@pytest.mark.parametrize(("change", "message"), [
    ({"patch_size": None}, "Hugging Face config.json (model_type 'vit') field 'patch_size' is missing"),
    ({"patch_size": 15}, "field 'patch_size'=15 does not divide image_size=224"),
    ({"image_size": [224, 224]}, "field 'image_size'=[224, 224] must be a positive integer"),
    ({"num_attention_heads": 7}, "field 'num_attention_heads'=7 does not divide hidden_size=768"),
    ({"hidden_act": "tanh"}, "field 'hidden_act'='tanh' is not supported"),
    ({"id2label": []}, "field 'id2label'=[] must map each class index to its label"),
    ({"qkv_bias": "yes"}, "field 'qkv_bias'='yes' must be true or false"),
])
def test_bad_keys_are_named(change: dict[str, Any], message: str) -> None:
    cfg = {k: v for k, v in (VIT_BASE | change).items() if v is not None}
    with pytest.raises(ConfigError) as exc:
        load_model(cfg)
    assert message in str(exc.value) and "\n" not in str(exc.value)


_FUZZ_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size",
              "patch_size", "num_channels", "qkv_bias", "hidden_act", "id2label", "num_labels",
              "hidden_dropout_prob")
_FUZZ_VALUES = (None, 0, -1, 1, 2, 3, 7, 16, 224, 3.5, "8", True, [], {}, "gelu", {"0": "a"})


def test_any_mangled_vit_config_imports_or_fails_in_one_sentence(mangled_configs_import_or_fail) -> None:
    mangled_configs_import_or_fail(VIT_BASE, _FUZZ_KEYS, _FUZZ_VALUES, examples=80)
