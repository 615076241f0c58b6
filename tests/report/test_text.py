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


def test_a_vit_is_measured_in_images_in_simulate_and_search() -> None:
    from madmax.report.text import print_result
    from madmax.search.text import throughput_per_gpu

    r = api.simulate("vit-b/16", "dgx-a100", 8, global_batch=256, strategy="zero=1,recompute=none")
    console = Console(width=120, record=True)
    print_result(r, console)
    text = console.export_text()
    # 256 images per iteration over 8 GPUs: images/s per GPU = 256 / t / 8, not 256 x 197 patch tokens / t / 8
    assert re.search(rf"images/s per GPU\s+│\s+{256 / r.iteration_time_s / 8:,.0f}", text)
    assert "tokens/s per GPU" not in text
    label, value = throughput_per_gpu("image", 8)
    assert label == "img/s/GPU" and value(r) == r.samples_per_s / 8
    assert throughput_per_gpu("sample", 8)[0] == "samples/s/GPU" and throughput_per_gpu("sequence", 8)[0] == "tok/s/GPU"
