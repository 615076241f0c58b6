"""Expert parallelism against hand-computed sizes: rows per rank, all-to-all volumes, group placement,
expert state under ep/etp/ZeRO, routing load, and the rules a strategy must follow."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax import api
from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.model import DecoderModel
from madmax.config.strategy import parse_strategy
from madmax.config.task import ExpertLoad, Task, parse_expert_load
from madmax.errors import MadmaxError, StrategyError
from madmax.parallel import experts
from madmax.parallel.memory import stage_memory
from madmax.parallel.placement import expert_span
from madmax.parallel.plan import build_plan
from madmax.parallel.tensor import Shape, backward_kernels, forward_kernels
from madmax.workload import build_workload

H, E, K, F, T = 2048, 128, 8, 768, 4096


def qwen3_30b_like(**moe) -> dict:
    """Qwen3-30B-A3B's shape (Hugging Face config.json of Qwen/Qwen3-30B-A3B)."""
    return {"name": "moe-test", "num_layers": 48, "hidden_size": H, "num_heads": 32, "num_kv_heads": 4,
            "head_dim": 128, "ffn_hidden_size": 6144, "is_gated_ffn": True, "activation": "silu",
            "norm": "rmsnorm", "qk_norm": True, "vocab_size": 151936, "max_seq_len": 40960,
            "train_seq_len": 4096,
            "moe": {"num_experts": E, "top_k": K, "expert_ffn_hidden_size": F} | moe}


def moe_block():
    workload = build_workload(DecoderModel(**qwen3_30b_like()), Task(kind="pretrain"))
    return next(b for b in workload.blocks if b.name == "layer")


def test_expert_gemms_get_t_times_k_rows_over_the_local_experts():
    block = moe_block()
    up = next(op for op in block.ops if op.name == "layer.expert_up")
    shape = Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2, ep=16)
    (kernel,) = forward_kernels(up, shape, flash=True)
    assert kernel.grouped and kernel.batch == E // 16  # 8 local experts
    assert kernel.batch * kernel.m == T * K  # every token's k rows land on some rank: T*k per rank on average
    assert (kernel.k, kernel.n) == (H, F)
    assert kernel.flops == 2 * T * K * H * F
    # Expert TP: each etp rank gets all of its group's rows and 1/etp of the width.
    etp = Shape(batch=1, seq_len=T, tp=2, cp=1, sp=True, act_bytes=2, ep=8, etp=2)
    (kernel,) = forward_kernels(up, etp, flash=True)
    assert (kernel.batch * kernel.m, kernel.n) == (T * K, F // 2)
    # Backward: input gradient and weight gradient, each the forward's FLOPs.
    assert [k.flops for k in backward_kernels(up, shape, flash=True)] == [2 * T * K * H * F] * 2


def test_busiest_rank_does_load_times_the_mean_but_model_flops_stay_the_mean():
    up = next(op for op in moe_block().ops if op.name == "layer.expert_up")
    shape = Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2, ep=16, expert_load=1.5)
    (kernel,) = forward_kernels(up, shape, flash=True)
    assert kernel.batch * kernel.m == pytest.approx(1.5 * T * K, abs=kernel.batch)
    assert kernel.flops == 2 * T * K * H * F


def test_dispatch_and_combine_volumes():
    block = moe_block()
    s = parse_strategy("tp=1,ep=16")
    s = s.model_copy(update={"dp": 16})
    shape = Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2, ep=16)
    fwd, bwd = experts.token_exchange(block, shape, s, experts.spans(s, 8))
    size = T * K * H * 2  # bytes each rank sends: every token to k experts, 16 bits
    assert [(c.label, c.kind, c.size_bytes) for c in fwd] == [
        ("ep.dispatch", Collective.ALL_TO_ALL, size), ("ep.combine", Collective.ALL_TO_ALL, size)]
    assert [c.size_bytes for c in bwd] == [size, size]
    assert fwd[0].span == Span(8, 2)  # 16 EP ranks over two 8-GPU nodes
    fp8 = s.model_copy(update={"dispatch_fp8": True})
    fwd, _ = experts.token_exchange(block, shape, fp8, experts.spans(fp8, 8))
    assert fwd[0].size_bytes == size / 2 and fwd[1].size_bytes == size
    # All experts local: no exchange.
    one = s.model_copy(update={"ep": 1})
    assert experts.token_exchange(block, Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2), one,
                                  experts.spans(one, 8)) == ([], [])


def test_etp_adds_a_gather_and_a_scatter_of_the_group_rows():
    block = moe_block()
    s = parse_strategy("tp=2,ep=4,etp=2").model_copy(update={"dp": 4})
    shape = Shape(batch=1, seq_len=T, tp=2, cp=1, sp=True, act_bytes=2, ep=4, etp=2)
    fwd, _ = experts.token_exchange(block, shape, s, experts.spans(s, 8))
    sent = T / 2 * K * H * 2  # T/tp tokens per rank under sequence parallelism
    assert [(c.group, c.kind, c.size_bytes) for c in fwd] == [
        ("ep", Collective.ALL_TO_ALL, sent), ("etp", Collective.ALL_GATHER, 2 * sent),
        ("etp", Collective.REDUCE_SCATTER, 2 * sent), ("ep", Collective.ALL_TO_ALL, sent)]


@pytest.mark.parametrize(("tp", "dp", "ep", "etp", "group", "expected"), [
    (1, 16, 16, 1, "ep", Span(8, 2)),  # EP across two nodes
    (1, 16, 8, 1, "ep", Span(8, 1)),  # EP inside a node; its 2 copies reduce gradients across nodes
    (1, 16, 8, 1, "edp", Span(1, 2)),
    (2, 8, 8, 2, "ep", Span(4, 2)),  # etp innermost: EP ranks stride 2, four per 8-GPU node
    (2, 8, 8, 2, "etp", Span(2, 1)),
])
def test_expert_groups_fold_etp_ep_edp_from_the_innermost(tp, dp, ep, etp, group, expected):
    s = parse_strategy(f"tp={tp},ep={ep},etp={etp}").model_copy(update={"dp": dp})
    assert expert_span(s, (group,), 8) == expected


def test_expert_state_is_split_over_ep_and_sharded_over_edp():
    model = DecoderModel(**qwen3_30b_like())
    workload = build_workload(model, Task(kind="pretrain"))
    s = parse_strategy("tp=1,ep=8,zero=1").model_copy(update={"dp": 16})
    plan = build_plan(workload, s, domain_size=8, seq_len=T, global_batch=64, dtype=DType.BF16)
    unit = plan.units["layer"]
    expert_params = 3 * E * H * F
    assert unit.expert_params == expert_params / 8
    assert plan.expert_data.shard == 2  # 16 ranks / ep 8 = 2 copies of each expert share its state
    assert plan.data.shard == 16
    memory = stage_memory(plan, 0, 0.0)
    u = plan.units
    dense = u["embedding"].params + 48 * (unit.params - unit.expert_params) + u["head"].params
    # fp32 master weights and two Adam moments (12 bytes) sharded over each group's ranks.
    assert memory.optimizer_bytes == pytest.approx(12 * (dense / 16 + 48 * unit.expert_params / 2))


def test_touched_experts():
    assert experts.touched_experts(8, 2, 1) == pytest.approx(2)
    assert experts.touched_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    assert experts.touched_experts(256, 8, 10_000) == pytest.approx(256)


def test_routing_load_factors():
    assert parse_expert_load(None).factor(128, 16) == 1
    assert parse_expert_load("1.3").factor(128, 16) == 1.3
    assert parse_expert_load("1.3", 1.1).factor(128, 16) == 1.1
    # Zipf alpha=1 over 4 experts on 2 ranks: shares 1, 1/2 | 1/3, 1/4 -> busiest 1.5 over mean 25/24.
    assert parse_expert_load("zipf:1").factor(4, 2) == pytest.approx(1.5 / (25 / 24))
    assert ExpertLoad("zipf", 1.0).factor(4, 4) == pytest.approx(1 / (25 / 48))


@pytest.mark.parametrize("text", ["0.9", "zipf:0", "zipf:-1", "zipf:", "skewed", "inf", "nan"])
def test_bad_routing_load_is_refused(text):
    with pytest.raises(MadmaxError, match=r"task\.expert_load"):
        parse_expert_load(text)


@pytest.mark.parametrize(("strategy", "message"), [
    ("tp=1,ep=3", "strategy.ep=3 does not divide moe.num_experts=128"),
    ("tp=1,ep=32", "strategy.ep*etp=1*32" if False else "ep*etp=32*1=32 does not divide the tp*cp*dp=16"),
    ("tp=1,ep=1,etp=2", "strategy.etp=2 needs expert parallelism"),
    ("tp=2,ep=2,sp=0", "need sequence parallelism"),
    ("tp=1,ep=2,etp=5", "strategy.etp=5 does not divide moe.expert_ffn_hidden_size=768"),
])
def test_impossible_expert_strategies_are_refused(strategy, message):
    with pytest.raises(StrategyError, match=message.replace("*", r"\*")):
        api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy=strategy, global_batch=64)


def test_topk_above_experts_is_refused():
    with pytest.raises(MadmaxError, match="top_k=9 exceeds num_experts=8"):
        api.simulate(qwen3_30b_like(num_experts=8, top_k=9), "dgx-h100", 8)


def test_overlapping_the_all_to_all_hides_it_behind_compute():
    plain = api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy="tp=1,ep=16,zero=1", global_batch=64)
    overlapped = api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy="tp=1,ep=16,zero=1,ep_overlap=1",
                              global_batch=64)
    comm = plain.breakdown["communication_s"]["ep.all_to_all"]
    # Without overlap the layer waits for it: all of it is exposed, but for the share that goes to the data-parallel
    # collectives exposed beside the last layers' all-to-alls (concurrent exposure is split: results.breakdown).
    assert comm["exposed"] == pytest.approx(comm["total"], rel=0.01)
    hidden = overlapped.breakdown["communication_s"]["ep.all_to_all"]
    assert hidden["total"] == pytest.approx(comm["total"])
    assert hidden["overlapped"] > 0.5 * hidden["total"]
    assert overlapped.iteration_time_s < plain.iteration_time_s
    with pytest.raises(StrategyError, match="ep_overlap=1"):
        api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy="tp=1,ep=16,ep_overlap=1", global_batch=16)


def test_model_tflops_count_top_k_experts_per_token():
    result = api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy="tp=1,ep=16,zero=1", global_batch=64)
    workload = build_workload(DecoderModel(**qwen3_30b_like()), Task(kind="pretrain"))
    flops_per_token = 3 * workload.forward_flops_per_token(T)
    expected = flops_per_token * result.tokens_per_s_per_gpu / 1e12
    assert result.model_tflops_per_gpu == pytest.approx(expected, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(ep=st.sampled_from([1, 2, 4, 8, 16]), etp=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2]),
       load=st.sampled_from(["balanced", "1.2", "zipf:0.8"]), overlap=st.booleans())
def test_any_valid_expert_strategy_simulates_or_is_refused_in_one_sentence(ep, etp, tp, load, overlap):
    strategy = f"tp={tp},ep={ep},etp={etp},zero=1,ep_overlap={int(overlap)}"
    try:
        result = api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy=strategy, global_batch=64,
                              expert_load=load)
    except MadmaxError as exc:
        assert "\n" not in str(exc) and "allowed" in str(exc)
        return
    assert result.iteration_time_s > 0 and math.isfinite(result.iteration_time_s)
    compute = sum(result.breakdown["compute_s"].values()) if isinstance(result.breakdown["compute_s"], dict) else 0
    assert compute >= 0


def test_deepep_sends_one_copy_per_remote_node():
    # 8 domains, k = 8 uniform: a token reaches 8 (1 - (7/8)^8) = 5.25 domains, 7/8 of them remote.
    up = next(op for op in moe_block().ops if op.name == "layer.expert_up")
    assert experts.remote_domains(up, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8) * 7 / 8)
    # DeepSeek-V3's group-limited routing, 4 of 8 groups on 8 nodes: 4 (1 - (3/4)^8) domains.
    limited = up.__class__(**{**{f: getattr(up, f) for f in up.__slots__}, "route_groups": 8,
                              "route_group_topk": 4})
    assert experts.remote_domains(limited, 8) == pytest.approx(4 * (1 - 0.75 ** 8) * 7 / 8)
    block = moe_block()
    s = parse_strategy("tp=1,ep=16,dispatcher=deepep").model_copy(update={"dp": 16})
    shape = Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2, ep=16)
    fwd, _ = experts.token_exchange(block, shape, s, experts.spans(s, 8))
    across, inside = fwd[0], fwd[1]
    assert across.span == Span(1, 2) and inside.span == Span(8, 1)
    # nccl-tests size: (n-1)/n of it leaves, n = 2 domains: T h D_remote elements cross.
    assert across.size_bytes / 2 == pytest.approx(T * H * 2 * experts.remote_domains(up, 2))
    assert inside.size_bytes == T * K * H * 2
    plain = api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy="tp=1,ep=16,zero=1", global_batch=64)
    deepep = api.simulate(qwen3_30b_like(), "dgx-h100", 16, strategy="tp=1,ep=16,zero=1,dispatcher=deepep",
                          global_batch=64)
    assert deepep.iteration_time_s < plain.iteration_time_s


def test_expert_order_moves_the_ep_group_across_domains():
    s = parse_strategy("tp=1,ep=8,expert_order=etp-edp-ep").model_copy(update={"dp": 16})
    assert expert_span(s, ("ep",), 8) == Span(4, 2)  # 2 copies inside each node, the EP group over both
    assert expert_span(s, ("edp",), 8) == Span(2, 1)
    assert "expert_order=etp-edp-ep" in s.describe()


@pytest.mark.parametrize("factor", [0.0, -1.0, 0.5, math.inf, math.nan])
def test_bad_capacity_factor_is_refused(factor):
    with pytest.raises(MadmaxError, match=r"task\.capacity_factor=.* must be a finite number >= 1"):
        parse_expert_load(None, factor)
