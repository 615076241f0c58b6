"""The vit family: published parameter counts of the catalog entries, the workload's ops and FLOPs (hand
computed), and bad shapes refused in one sentence."""

from __future__ import annotations

import pytest

from madmax.config.loaders import load_model
from madmax.config.task import Task
from madmax.errors import ConfigError
from madmax.workload import build_workload, param_counts
from madmax.workload.ops import OpKind

M = 10**6


def total(name: str) -> int:
    return sum(param_counts(load_model(name)).values())


# (catalog name, published count, the publisher's last digit, whether the published count includes the head)
PUBLISHED = [
    ("vit-b/16", 86.6 * M, 0.1 * M, True),  # timm vit_base_patch16_224: 86.6 M with the ImageNet-1k head
    ("vit-l/16", 304.3 * M, 0.1 * M, True),  # timm vit_large_patch16_224: 304.3 M
    ("vit-h/14", 632 * M, 1 * M, True),  # Dosovitskiy et al. 2021 Table 1: ViT-Huge 632 M
    ("vit-g/14", 1011 * M, 1 * M, False),  # Zhai et al. 2022 Table 2: ViT-g/14 1011 M (no head)
]


@pytest.mark.parametrize(("name", "published", "digit", "with_head"), PUBLISHED)
def test_published_parameter_counts(name: str, published: float, digit: float, with_head: bool) -> None:
    counts = param_counts(load_model(name))
    computed = sum(counts.values()) - (0 if with_head else counts["head"])
    assert abs(computed - published) <= digit / 2


def test_vit_b16_components_by_hand() -> None:
    # h 768, f 3072, 12 layers, patch 16 (C*p*p = 768), s = 14*14 + 1 = 197, 1000 classes:
    # patch 768*768 + 768; positions 197*768 + class token 768; attention per layer 4*768^2 + 4*768;
    # MLP 2*768*3072 + 3072 + 768; norms 12 * 2 * 1536 + final 1536; head 768*1000 + 1000.
    assert param_counts(load_model("vit-b/16")) == {
        "patch_embedding": 590_592, "position": 152_064, "attention": 12 * 2_362_368, "mlp": 12 * 4_722_432,
        "norms": 38_400, "head": 769_000}
    assert total("vit-b/16") == 86_567_656


def test_vit_22b_layers_are_the_published_21743m() -> None:
    # Dehghani et al. 2023 Table 1: 21,743 M. Per layer, no biases: 4h^2 + 2hf = 452,984,832, one shared
    # LayerNorm gain h = 6,144, QK norms 2*128 -> 452,991,232; 48 layers = 21,743,579,136.
    counts = param_counts(load_model("vit-22b"))
    layers = counts["attention"] + counts["mlp"] + counts["norms"] - 6_144  # without the final norm's gain
    assert layers == 48 * 452_991_232
    assert abs(layers - 21_743 * M) <= M / 2 + M / 2  # the published number to its last digit (M)
    assert load_model("vit-22b").seq_len == 256  # no class token: 16 x 16 patches


def test_vit_b16_forward_flops_per_token_by_hand() -> None:
    # Per token, s = 197: patch 2*768*768 = 1,179,648; positions h = 768. Per layer: norms 2 * 5h = 7,680;
    # qkv 2*768*2304 = 3,538,944; attention, not causal: 4*s*h = 605,184 (the whole square); out 1,179,648;
    # up and down 2 * 4,718,592; GELU 8*3072 = 24,576; residuals 2h = 1,536 -> 14,794,752 x 12 layers.
    # Head, once per image on the class token: norm 3,840; classifier 2*768*1000 = 1,536,000; loss 5*1000.
    workload = build_workload(load_model("vit-b/16"), Task(kind="pretrain"))
    head = 3_840 + 1_536_000 + 5_000
    assert workload.sequence_flops(197) == head
    assert workload.forward_flops_per_token(197) == pytest.approx(1_179_648 + 768 + 12 * 14_794_752 + head / 197,
                                                                  rel=1e-12)


def test_vit_head_runs_once_per_image() -> None:
    # The classifier's GEMM has one row per image (the class token), not one per patch: ViT-B/16 with 4 images
    # per micro-batch runs (4 x 768) @ (768 x 1000) in the head and (788 x 768) @ (768 x 2304) in QKV.
    from madmax.config.base import DType
    from madmax.config.strategy import parse_strategy, resolve_strategy
    from madmax.parallel.kernels import KernelKind
    from madmax.parallel.plan import build_plan

    model = load_model("vit-b/16")
    s, gb = resolve_strategy(parse_strategy("mbs=4,recompute=none"), num_gpus=1, model_name=model.name,
                             constraints={}, num_pipeline_units=model.num_layers, global_batch=4, seq_len=197)
    plan = build_plan(build_workload(model, Task(kind="pretrain")), s, domain_size=8, seq_len=197, global_batch=gb,
                      dtype=DType.BF16)
    def gemms(unit: str) -> list[tuple[int, int, int]]:
        return [(k.m, k.k, k.n) for k in plan.units[unit].fwd if k.kind is KernelKind.GEMM]

    assert gemms("head") == [(4, 768, 1000)]
    assert (4 * 197, 768, 2304) in gemms("layer")


def test_encoder_attention_is_not_causal_and_the_mlp_is_plain() -> None:
    workload = build_workload(load_model("vit-l/16"), Task(kind="pretrain"))
    layer = next(b for b in workload.blocks if b.name == "layer")
    (attn,) = [op for op in layer.ops if op.kind is OpKind.ATTENTION]
    assert not attn.causal and attn.forward_flops(197, 197) == 197 * 4 * 197 * 1024
    assert [op.name for op in layer.ops if op.kind is OpKind.GEMM] == ["layer.qkv", "layer.out", "layer.up",
                                                                       "layer.down"]
    patch = workload.blocks[0].ops[0]
    assert (patch.name, patch.k, patch.n) == ("embed.patch", 3 * 16 * 16, 1024)
    assert layer.count == 24 and workload.generates_tokens is False


def test_vit_22b_layer_is_parallel_with_qk_norm() -> None:
    layer = next(b for b in build_workload(load_model("vit-22b"), Task(kind="pretrain")).blocks if b.name == "layer")
    names = [op.name for op in layer.ops]
    assert names[:4] == ["layer.norm1", "layer.qkv", "layer.q_norm", "layer.k_norm"]
    assert names[-1] == "layer.residual" and "layer.norm2" not in names


def test_inference_trains_nothing() -> None:
    workload = build_workload(load_model("vit-b/16"), Task(kind="inference", batch=8))
    assert not any(op.trainable for b in workload.blocks for op in b.ops)


BASE = {"family": "vit", "name": "v", "image_size": 224, "patch_size": 16, "num_layers": 2, "hidden_size": 64,
        "num_heads": 4, "ffn_hidden_size": 256, "num_classes": 10}


@pytest.mark.parametrize(("change", "message"), [
    ({"patch_size": 15}, "model: patch_size=15 does not divide image_size=224; allowed: a divisor of 224"),
    ({"num_classes": 0}, "model.num_classes=0: Input should be greater than 0"),
    ({"num_heads": 5}, "model: num_heads=5 does not divide hidden_size=64"),
    ({"patch_size": 0}, "model.patch_size=0: Input should be greater than 0"),
])
def test_bad_shapes_are_one_sentence(change: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_model(BASE | change)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_seq_len_other_than_the_image_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"task.seq_len=4096 does not apply to the vit model vit-b/16.*allowed: 197"):
        build_workload(load_model("vit-b/16"), Task(kind="pretrain", seq_len=4096))
