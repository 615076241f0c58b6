"""`madmax inspect` in the terminal (madmax.report.text.print_inspect): the experts' and latent attention's
shape and the active parameters appear for the models that have them, and only for those."""

from __future__ import annotations

import re

from rich.console import Console

from madmax import api
from madmax.report.text import print_inspect


def shown(name: str) -> dict[str, str]:
    """The rows of the inspect table of `name`, label -> value."""
    console = Console(width=120, record=True)
    print_inspect(api.inspect(name), console)
    rows = re.findall(r"│ (.+?)\s+│ (.+?)\s+│", console.export_text())
    return dict(rows)


def test_deepseek_v3_shows_experts_latents_and_active_params() -> None:
    rows = shown("deepseek-v3")
    assert (rows["moe.num_experts"], rows["moe.top_k"], rows["moe.expert_ffn_hidden_size"]) == ("256", "8", "2048")
    assert (rows["moe.shared_experts"], rows["moe.first_dense_layers"]) == ("1", "3")
    assert (rows["mla.q_lora_rank"], rows["mla.kv_lora_rank"], rows["mla.qk_rope_head_dim"]) == ("1536", "512", "64")
    # 682,636,487,424 in all (the MTP module's 11,610,068,224 included); 37,552,297,472 per token.
    assert (rows["total params"], rows["  mtp"], rows["active params/token"]) == ("682.636 B", "11.610 B", "37.552 B")
    assert "num_kv_heads" not in rows and "head_dim" not in rows  # MLA's widths are the mla rows


def test_interleaved_experts_show_their_frequency() -> None:
    rows = shown("llama-4-maverick")
    assert (rows["moe.layer_freq"], rows["moe.shared_experts"], rows["num_kv_heads"]) == ("2", "1", "8")


def test_dense_models_show_no_expert_rows() -> None:
    rows = shown("llama-3.1-8b")
    assert not any(key.startswith(("moe.", "mla.", "active")) for key in rows)
    assert rows["total params"] == "8.030 B"
