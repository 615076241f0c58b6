"""Any vit model file with sizes a user could get wrong either simulates or fails in one sentence."""

from __future__ import annotations

import math
from typing import Any

from madmax.api import simulate
from madmax.errors import MadmaxError

BASE = {"family": "vit", "name": "v", "image_size": 64, "patch_size": 16, "num_layers": 2, "hidden_size": 64,
        "num_heads": 4, "ffn_hidden_size": 256, "num_classes": 10}
_KEYS = ("image_size", "patch_size", "num_channels", "num_layers", "hidden_size", "num_heads", "ffn_hidden_size",
         "num_classes", "class_token", "qkv_bias", "bias", "norm_bias", "parallel_layers", "qk_norm", "activation")
_VALUES = (None, 0, -1, 1, 2, 3, 7, 8, 16, 24, 96, 2.5, "16", True, False, "gelu", "tanh", [])
_STRATEGIES = (None, "zero=3", "tp=2,sp=1", "pp=2,mbs=2", "cp=2")


def test_any_mangled_vit_model_simulates_or_fails_in_one_sentence(mangle) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), max_size=3),
           st.sampled_from(_STRATEGIES), st.sampled_from(("pretrain", "inference")))
    def check(changes: dict[str, Any], strategy: str | None, task: str) -> None:
        try:
            result = simulate(mangle(BASE, changes), "dgx-a100", 8, task=task, strategy=strategy,
                              **({"batch": 16} if task == "inference" else {"global_batch": 16}))
        except MadmaxError as exc:
            message = str(exc)
            assert "\n" not in message and "Traceback" not in message
            return
        assert math.isfinite(result.iteration_time_s) and result.iteration_time_s > 0

    check()
