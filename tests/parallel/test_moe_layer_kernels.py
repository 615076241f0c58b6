"""What a training stack runs around an MoE layer's experts (`experts.layer_kernels`, `experts.dispatch_counts`):
the all-to-all dispatcher's sort passes and token-count all-gather, Megatron-Core's per-expert bias loop and
eager GLU clamp, by hand for one layer; and that more experts per rank at fixed tokens never speed a layer up."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.loaders import load_model, load_system
from madmax.config.model import DecoderModel
from madmax.config.strategy import parse_strategy
from madmax.config.task import Task
from madmax.config.training_stack import load_training_stack
from madmax.errors import MadmaxError
from madmax.hardware.collectives import network_model
from madmax.hardware.compute import compute_model
from madmax.parallel import experts
from madmax.parallel.kernels import KernelKind, Phase
from madmax.parallel.plan import build_plan
from madmax.parallel.tensor import Shape
from madmax.program.costs import unit_times
from madmax.workload import build_workload

T = 4096
MEGATRON, AUTOMODEL = load_training_stack("megatron-core"), load_training_stack("automodel")


def qwen3_30b_like(**moe) -> dict:
    """Qwen3-30B-A3B's shape (Hugging Face config.json of Qwen/Qwen3-30B-A3B): h 2048, 128 experts of 768, top 8."""
    return {"name": "moe-test", "num_layers": 2, "hidden_size": 2048, "num_heads": 32, "num_kv_heads": 4,
            "head_dim": 128, "ffn_hidden_size": 6144, "is_gated_ffn": True, "activation": "silu", "norm": "rmsnorm",
            "qk_norm": True, "vocab_size": 151936, "max_seq_len": 40960,
            "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden_size": 768} | moe}


def gpt_oss_like(num_experts: int = 32, **moe) -> dict:
    """gpt-oss-20b's layer (Hugging Face config.json of openai/gpt-oss-20b): h 2880, experts of 2880 with biases,
    top 4, clamped SwiGLU."""
    return {"name": "oss-test", "num_layers": 2, "hidden_size": 2880, "num_heads": 64, "num_kv_heads": 8,
            "head_dim": 64, "ffn_hidden_size": 2880, "is_gated_ffn": True, "activation": "silu", "norm": "rmsnorm",
            "has_bias": True, "vocab_size": 201088, "max_seq_len": 4096,
            "moe": {"num_experts": num_experts, "top_k": 4, "expert_ffn_hidden_size": 2880, "expert_bias": True,
                    "router_bias": True, "glu_limit": 7.0} | moe}


def layer(spec: dict):
    workload = build_workload(DecoderModel(**spec), Task(kind="pretrain"))
    return next(b for b in workload.blocks if b.is_layer)


def extra(block, strategy: str, stack=MEGATRON, *, ep: int, backward: bool = False) -> dict[str, list]:
    s = parse_strategy(strategy)
    shape = Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2, ep=ep)
    return {op.name.rsplit(".", 1)[-1]: ks for op in block.ops
            if (ks := experts.layer_kernels(block, op, shape, s, stack, backward=backward))}


def test_alltoall_dispatcher_sorts_the_rows_by_local_expert_by_hand():
    # Qwen3-30B-A3B at ep 16: 8 local experts; R = T k = 4096 * 8 = 32,768 rows of h = 2048. Each sort
    # (after the dispatch, and before the combine) reads and writes them: 2 * 32,768 * 2048 * 2 B = 268,435,456 B,
    # in the forward and again in the backward.
    block = layer(qwen3_30b_like())
    for backward in (False, True):
        kernels = extra(block, "ep=16", ep=16, backward=backward)
        assert sorted(kernels) == ["expert_down", "permute"]
        assert [(k.kind, k.num_bytes) for k in kernels["permute"]] == [(KernelKind.MEMORY, 268_435_456)]
        assert [k.num_bytes for k in kernels["expert_down"]] == [268_435_456]
    # DeepEP returns the rows grouped by expert: no sort; one local expert (ep = E = 128): nothing to sort.
    assert extra(block, "ep=16,dispatcher=deepep", ep=16) == {}
    assert extra(block, "ep=128", ep=128) == {}


def test_megatron_bias_loop_and_clamp_by_hand():
    # gpt-oss-20b at ep 8: 4 local experts, R = 4096 * 4 = 16,384 rows, h = f = 2880, 2 B per element.
    rows, h, f = 16_384, 2880, 2880
    block = layer(gpt_oss_like())
    fwd = extra(block, "ep=8", ep=8)
    bwd = extra(block, "ep=8", ep=8, backward=True)
    # expert_down: the sort back (2 R h elements), then TEGroupedMLP._apply_bias: forward 1 + 2 per expert = 9
    # kernels moving 6 R h elements; backward 2 + 5 per expert = 22 kernels moving 8 R h.
    sort, *bias = fwd["expert_down"]
    assert sort.num_bytes == 2 * rows * h * 2
    assert len(bias) == 9 and sum(k.num_bytes for k in bias) == pytest.approx(6 * rows * h * 2)
    _, *bias = bwd["expert_down"]
    assert len(bias) == 22 and sum(k.num_bytes for k in bias) == pytest.approx(8 * rows * h * 2)
    # expert_act: the clamp of the R x 2f gate and linear inputs: forward 3 kernels, 4 E; backward 9, 7.5 E.
    assert len(fwd["expert_act"]) == 3
    assert sum(k.num_bytes for k in fwd["expert_act"]) == pytest.approx(4 * rows * 2 * f * 2)
    assert len(bwd["expert_act"]) == 9
    assert sum(k.num_bytes for k in bwd["expert_act"]) == pytest.approx(7.5 * rows * 2 * f * 2)


def test_automodel_adds_its_bias_at_once_and_clamps_inside_its_activation():
    # AutoModel: repeat_interleave, weight and add: 3 kernels (no loop over experts), 6 R h; no eager clamp;
    # DeepEP: no sort.
    block = layer(gpt_oss_like())
    kernels = extra(block, "ep=8,dispatcher=deepep", AUTOMODEL, ep=8)
    assert sorted(kernels) == ["expert_down"]
    assert len(kernels["expert_down"]) == 3
    assert sum(k.num_bytes for k in kernels["expert_down"]) == pytest.approx(6 * 16_384 * 2880 * 2)


def test_no_bias_no_clamp_no_eager_ops():
    block = layer(gpt_oss_like(expert_bias=False, glu_limit=None))
    assert sorted(extra(block, "ep=8,dispatcher=deepep", ep=8)) == []


def test_token_counts_are_all_gathered_over_the_ep_group():
    # E = 128 int64 from each of 16 ranks: 16 * 128 * 8 = 16,384 B gathered, over two 8-GPU nodes, forward only.
    block = layer(qwen3_30b_like())
    s = parse_strategy("ep=16").model_copy(update={"dp": 16})
    (counts,) = experts.dispatch_counts(block, s, experts.spans(s, 8))
    assert (counts.kind, counts.size_bytes, counts.span, counts.phase) == (
        Collective.ALL_GATHER, 16_384, Span(8, 2), Phase.FORWARD)
    deepep = s.model_copy(update={"dispatcher": "deepep"})
    one = s.model_copy(update={"ep": 1})
    assert experts.dispatch_counts(block, deepep, experts.spans(deepep, 8)) == []
    assert experts.dispatch_counts(block, one, experts.spans(one, 8)) == []


def test_glu_limit_needs_a_gated_ffn():
    spec = gpt_oss_like() | {"is_gated_ffn": False, "activation": "gelu"}
    with pytest.raises(MadmaxError, match=r"moe.glu_limit=7.0 clamps a gated activation's inputs; allowed: "
                                          r"is_gated_ffn=true, or no glu_limit"):
        load_model(spec)


@pytest.mark.parametrize("field", [
    {"expert_bias": {"forward": {"kernels": 1, "moved": -1}, "backward": {"moved": 1}}},
    {"glu_clamp": {"forward": {"kernels": 1, "moved": 1, "launches": 2}, "backward": {"moved": 1}}},
    {"expert_bias": {"forward": {"kernels": 1}, "backward": {"moved": 1}}},
    {"expert_gemm": "cutlass"},
])
def test_bad_eager_ops_fields_are_one_sentence(field):
    with pytest.raises(MadmaxError) as info:
        load_training_stack({"name": "mine", **field})
    assert "\n" not in str(info.value) and next(iter(field)) in str(info.value)


def test_megatron_launches_one_gemm_per_expert_serving_engines_one_kernel():
    # Transformer Engine's GroupedLinear (megatron-core): multi-stream, even with one local expert (ep = E);
    # a stack that does not say so (pytorch) keeps one grouped kernel.
    workload = build_workload(DecoderModel(**qwen3_30b_like()), Task(kind="pretrain"))
    for ep, stack, multi in ((8, MEGATRON, True), (128, MEGATRON, True), (8, load_training_stack("pytorch"), False)):
        s = parse_strategy(f"ep={ep},recompute=none").model_copy(update={"dp": ep})
        plan = build_plan(workload, s, domain_size=8, seq_len=T, global_batch=ep, dtype=DType.BF16, stack=stack)
        unit = next(u for u in plan.units.values() if u.is_layer)
        routed = [k for k in unit.fwd if k.kind is KernelKind.GEMM and k.batch == 128 // ep and k.n in (768, 2048)
                  and k.k in (768, 2048) and k.m != T]
        assert routed and all(k.multi_stream is multi and k.grouped is (multi or ep < 128) for k in routed)


H100_NODE = load_system("dgx-h100")
COMPUTE = compute_model(H100_NODE.gpu, None)
NETWORK = network_model(H100_NODE)


def layer_seconds(spec: dict, ep: int, dtype: DType = DType.BF16) -> float:
    """Forward plus backward seconds of one MoE layer of one micro-batch of 4096 tokens on one rank, with its
    token exchange (`unit_times`, the megatron-core stack)."""
    workload = build_workload(DecoderModel(**spec), Task(kind="pretrain"))
    s = parse_strategy(f"ep={ep},recompute=none").model_copy(update={"dp": ep})
    plan = build_plan(workload, s, domain_size=8, seq_len=T, global_batch=ep, dtype=dtype)
    unit = next(u for u in plan.units.values() if u.is_layer)
    t = unit_times(unit, COMPUTE, NETWORK, dtype)
    return t.fwd_s + t.bwd_s + sum(seconds for *_, seconds in t.after_fwd + t.after_bwd)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(3, 6), st.booleans())
def test_more_experts_per_rank_at_fixed_tokens_never_speed_a_layer_up(ep, log_experts, oss):
    # Twice the experts at the same ep, top_k and tokens: twice the local experts share the rank's R rows.
    experts_n = 2**log_experts * ep
    spec = gpt_oss_like if oss else qwen3_30b_like
    assert layer_seconds(spec(num_experts=2 * experts_n), ep) >= layer_seconds(spec(num_experts=experts_n), ep)
