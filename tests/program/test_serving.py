"""The serving step: what a replica holds, the kernels of a step, the all-reduce kernels, and the closed form
(`step_time`) against the simulated program (`build_step` + `sim.schedule`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.loaders import find_in_catalog, load_model, load_system
from madmax.config.stack import load_stack
from madmax.config.strategy import Strategy
from madmax.config.task import Task
from madmax.hardware.collectives import network_model
from madmax.parallel.serving import Step, build_serving_plan
from madmax.program.serving import build_step, group_step_time, make_runtime, stage_times, step_period, step_time
from madmax.sim import schedule
from madmax.workload import build_workload

H100 = load_system("dgx-h100", 8)


def plan_of(model: str, tp: int, pp: int = 1, gemm: DType = DType.BF16, stored: float = 2.0,
            kv: DType = DType.BF16, system=H100):
    workload = build_workload(load_model(model), Task(kind="inference", batch=1))
    return build_serving_plan(workload, Strategy(tp=tp, pp=pp, dp=system.cluster_gpus // (tp * pp)),
                              domain_size=system.scale_up_domain, act_dtype=DType.BF16, gemm_dtype=gemm,
                              weight_width=None, weight_bytes_per_param=stored, kv_dtype=kv)


def runtime(stack: str = "trtllm", system=H100):
    return make_runtime(load_stack(stack), system, network_model(system))


def test_weights_per_gpu_by_hand():
    # llama-3.1-8b: 8,030,261,248 parameters, all in bf16 at tp=1: 16,060,522,496 bytes.
    assert plan_of("llama-3.1-8b", 1).weights_bytes(0) == 2 * 8_030_261_248
    # fp8 layers (1 byte); the embedding, the LM head and its final norm stay in bf16: 2 * (1,050,673,152
    # + 4096) + the layers' 6,979,584,000 at 1 byte = 9,080,938,496.
    assert plan_of("llama-3.1-8b", 1, gemm=DType.FP8, stored=1.0).weights_bytes(0) == 9_080_938_496


def test_kv_cache_per_token_by_hand():
    # llama-3.1-70b: 80 layers, 8 KV heads of 128. K and V in bf16: 2 * 8 * 128 * 2 = 4096 B per layer and
    # token, 327,680 B per token for the model. tp=4: 2 heads per rank, 81,920 B per GPU per token.
    assert plan_of("llama-3.1-70b", 4).kv_bytes(0, 1) == 81_920
    # fp8 cache: half. tp=8: 1 head per rank, 40,960 B (bf16).
    assert plan_of("llama-3.1-70b", 4, kv=DType.FP8).kv_bytes(0, 1) == 40_960
    assert plan_of("llama-3.1-70b", 8).kv_bytes(0, 1) == 40_960


def test_kv_heads_replicate_beyond_tp():
    # 16 ranks over 2 nodes, 8 KV heads: each rank keeps one head (replicated), 80 * 2 * 128 * 2 B per token.
    two_nodes = load_system("dgx-h100", 16)
    assert plan_of("llama-3.1-70b", 16, system=two_nodes).kv_bytes(0, 1) == 80 * 2 * 128 * 2


def test_sliding_window_caps_the_cache():
    # mistral-7b: every layer attends 4096 tokens back, so a 10,000-token sequence caches 4096 per layer:
    # 32 layers * 2 * 8 heads * 128 * 2 B * 4096 tokens.
    plan = plan_of("mistral-7b", 1)
    assert plan.kv_bytes(0, 10_000) == 32 * 2 * 8 * 128 * 2 * 4096
    assert plan.kv_bytes(0, 1000) == 32 * 2 * 8 * 128 * 2 * 1000


def test_pipeline_stages_split_the_weights():
    # pp=2: the 32 layers split 16 + 16; the embedding on stage 0, the LM head on stage 1, so both stages
    # hold the same bytes: 16 layers of 218,112,000 parameters plus one 525,336,576 table; stage 1 adds the
    # final norm (4096).
    plan = plan_of("llama-3.1-8b", 1, pp=2)
    layer = (1_342_177_280 + 5_637_144_576 + 266_240 - 4096) // 32
    assert plan.weights_bytes(0) == 2 * (16 * layer + 525_336_576)
    assert plan.weights_bytes(1) == 2 * (16 * layer + 525_336_576 + 4096)


def test_decode_step_kernels_by_hand():
    # One decode step of 8 sequences at 1000 keys, llama-3.1-8b, tp=1: the GEMMs run at M = 8 tokens;
    # the LM head at M = 8 sampled sequences; the decode attention reads 8 * 1000 keys of 8 KV heads.
    plan = plan_of("llama-3.1-8b", 1)
    step = Step(decode=8, decode_kv_tokens=8000, sampled=8)
    layer, head = plan.work(0, step)[1], plan.work(0, step)[2]
    gemms = [k for k in layer.kernels if k.kind.value == "gemm"]
    assert {(k.m, k.k, k.n) for k in gemms} == {(8, 4096, 6144), (8, 4096, 4096), (8, 4096, 14336),
                                                (8, 14336, 4096)}
    (attn,) = [k for k in layer.kernels if k.kind.value == "attention"]
    assert (attn.batch, attn.q_len, attn.kv_len, attn.kv_heads) == (8, 1, 1000, 8)
    assert [(k.m, k.n) for k in head.kernels if k.kind.value == "gemm"] == [(8, 128_256)]
    assert layer.unit.count == 32


def test_prefill_chunks_attend_to_cached_keys():
    # Two chunks in one step: 512 new tokens after 1024 cached (1536 keys) and a 256-token prompt. One
    # variable-length attention kernel; 768 tokens through the GEMMs.
    plan = plan_of("llama-3.1-8b", 1)
    step = Step(prefill=((512, 1536), (256, 256)), sampled=1)
    layer = plan.work(0, step)[1]
    (attn,) = [k for k in layer.kernels if k.kind.value == "attention"]
    assert attn.segments == ((512, 1536), (256, 256))
    assert {k.m for k in layer.kernels if k.kind.value == "gemm"} == {768}


def test_tensor_parallel_all_reduce_kernels():
    # trtllm on 8 H100 (NVLink 450 GB/s per direction): one-shot below 500 KB at tp > 4,
    # t = 9.5 us + 7 * S / (0.28 * 450 GB/s); beyond, NCCL's ring (the network model).
    rt = runtime("trtllm")
    span = Span(8, 1)
    s = 100_000
    assert rt.all_reduce_s(s, span) == pytest.approx(9.5e-6 + 7 * s / (0.28 * 450e9), rel=1e-9)
    # Beyond it NCCL, but never below the one-shot kernel's time at its 512,000-byte limit.
    big = 1_000_000
    at_limit = 9.5e-6 + 7 * 512_000 / (0.28 * 450e9)
    assert rt.all_reduce_s(big, span) == max(at_limit, rt.network.collective_s(Collective.ALL_REDUCE, big, span))
    # vLLM at tp=4: one-shot below 512 KB, two-shot up to 8 MB: 2 * 7.9 us + 2 * 3/4 * S / (0.14 * 450 GB/s)
    # up to the 1 MiB it was fitted on, each further byte at 0.58 x 450 GB/s.
    vllm = runtime("vllm")
    assert vllm.all_reduce_s(1_000_000, Span(4, 1)) == pytest.approx(2 * 7.9e-6 + 1.5 * 1e6 / (0.14 * 450e9),
                                                                     rel=1e-9)
    assert vllm.all_reduce_s(200_000, Span(4, 1)) == pytest.approx(9.5e-6 + 3 * 2e5 / (0.28 * 450e9), rel=1e-9)
    assert rt.all_reduce_s(s, Span(1, 1)) == 0.0


@settings(max_examples=200, deadline=None)
@given(stack=st.sampled_from(["trtllm", "trtllm-0.9", "vllm", "sglang"]), n=st.sampled_from([2, 4, 8]),
       size=st.floats(1.0, 64e6), grow=st.floats(1.0, 4.0))
def test_all_reduce_time_never_falls_as_the_message_grows(stack, n, size, grow):
    rt = runtime(stack)
    assert rt.all_reduce_s(size * grow, Span(n, 1)) >= rt.all_reduce_s(size, Span(n, 1))


def test_tp_adds_two_all_reduces_per_layer_and_one_for_a_parallel_layer():
    step = Step(decode=8, decode_kv_tokens=8000, sampled=8)
    llama = plan_of("llama-3.1-8b", 2).work(0, step)[1]
    assert [op.kind.value for op in llama.comm] == ["all_reduce", "all_reduce"]
    # GPT-J computes attention and FFN in parallel from one input: one all-reduce of their summed outputs.
    gptj = plan_of("gpt-j-6b", 2).work(0, step)[1]
    assert [op.kind.value for op in gptj.comm] == ["all_reduce"]


def test_graph_floor_applies_to_decode_steps_only_in_trtllm():
    rt = runtime("trtllm")
    assert rt.compute_for(Step(decode=8, decode_kv_tokens=800, sampled=8)) is rt.graph
    assert rt.compute_for(Step(prefill=((100, 100),), sampled=1)) is rt.eager
    # Beyond the largest captured decode batch (128) the step runs eagerly.
    assert rt.compute_for(Step(decode=256, decode_kv_tokens=2560, sampled=256)) is rt.eager
    assert runtime("vllm").compute_for(Step(prefill=((100, 100),), decode=4, decode_kv_tokens=40, sampled=5)) \
        is runtime("vllm").graph


steps = st.builds(
    lambda prefill, decode, keys: Step(prefill=tuple((q, q + c) for q, c in prefill), decode=decode,
                                       decode_kv_tokens=decode * keys if decode else 0.0,
                                       sampled=decode + len(prefill)),
    st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 4096)), max_size=3),
    st.integers(0, 256), st.integers(1, 8192)).filter(lambda s: s.tokens > 0)


@settings(max_examples=40, deadline=None)
@given(step=steps, layout=st.sampled_from([(1, 1), (2, 1), (1, 2), (2, 4), (1, 4)]),
       stack=st.sampled_from(["trtllm", "vllm", "sglang"]))
def test_closed_form_equals_the_simulated_program(step, layout, stack):
    # The fast estimate is the declared capability of the serving builder: it must be the simulation.
    tp, pp = layout
    plan, rt = plan_of("llama-3.1-8b", tp, pp), runtime(stack)
    built = build_step(plan, rt, step)
    simulated = step_period(built, schedule(built.program), rt.stack.host_step_s, rt.stack.host_overlaps_gpu)
    assert step_time(plan, rt, step) == pytest.approx(simulated, rel=1e-12)


def test_pipeline_period_by_hand():
    # pp micro-batches in flight: a micro-batch's step recurs after max(sum of stages + its sends, pp x the
    # slowest stage); with the host's pp preparations as a floor.
    plan, rt = plan_of("llama-3.1-8b", 1, pp=4), runtime("trtllm")
    step = Step(decode=16, decode_kv_tokens=16 * 2000, sampled=16)
    stages = [stage_times(plan, rt, s, step).total_s for s in range(4)]
    send = rt.network.collective_s(Collective.SEND_RECV, 16 * 4096 * 2, Span(2, 1))
    expected = max(max(sum(stages) + 4 * send, 4 * max(stages)), 4 * rt.stack.host_step_s)
    assert step_time(plan, rt, step) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(decode=st.integers(1, 512), keys=st.integers(1, 32_000), more=st.integers(1, 32_000))
def test_longer_contexts_are_never_faster(decode, keys, more):
    plan, rt = plan_of("llama-3.1-8b", 1), runtime("vllm")
    short = step_time(plan, rt, Step(decode=decode, decode_kv_tokens=decode * keys, sampled=decode))
    long = step_time(plan, rt, Step(decode=decode, decode_kv_tokens=decode * (keys + more), sampled=decode))
    assert long >= short



def catalog_model(name: str, renamed: str) -> dict:
    """A catalog model's fields under another name (a model file the tests may change)."""
    entry = find_in_catalog("models", name)
    return {k: v for k, v in entry.items() if k != "aliases"} | {"name": renamed}


# Mixture-of-experts serving: the catalog's Mixtral-8x7B and DeepSeek-V3, renamed.
MIXTRAL = catalog_model("mixtral-8x7b", "mixtral-like")
DEEPSEEK = catalog_model("deepseek-v3", "deepseek-like")


def moe_plan(model: dict, tp: int, ep: int, etp: int, num_gpus: int = 8, kv: DType = DType.BF16,
             stored: float = 1.0, **options):
    system = load_system("dgx-h100", num_gpus)
    workload = build_workload(load_model(model), Task(kind="inference", batch=1))
    strategy = Strategy(tp=tp, dp=num_gpus // tp, ep=ep, etp=etp, **options)
    return build_serving_plan(workload, strategy, domain_size=system.scale_up_domain, act_dtype=DType.BF16,
                              gemm_dtype=DType.FP8, weight_width=None, weight_bytes_per_param=stored, kv_dtype=kv)


def moe_layer(plan, step):
    """The work of the first MoE layer of stage 0 for `step`."""
    return next(w for w in plan.work(0, step) if any(op.experts for op in w.unit.block.ops))


def moe_unit(plan):
    return next(u for u in plan.stages[0] if any(op.experts for op in u.block.ops))


def test_mla_caches_the_latent_on_every_rank():
    # DeepSeek-V3: 61 layers, a latent of kv_lora_rank 512 plus the 64-wide rotary key per token and layer,
    # bf16: 61 * 576 * 2 = 70,272 B per token on each rank, whatever tp (one latent "head", replicated).
    assert moe_plan(DEEPSEEK, 1, 8, 1).kv_bytes(0, 1) == 70_272
    assert moe_plan(DEEPSEEK, 8, 8, 1).kv_bytes(0, 1) == 70_272
    assert moe_plan(DEEPSEEK, 8, 8, 1, kv=DType.FP8).kv_bytes(0, 1) == 35_136


def test_mla_decode_is_absorbed_and_prefill_expanded():
    # tp=8: 16 query heads per rank. Decode: one latent head (MQA); query/key width 512 + 64 = 576, value
    # width 512, costed at the mean 544: FLOPs 4 * 544 = 2 * (576 + 512) per query-key pair and head. The
    # cache is read as 576 elements per key: kv_width * 2 * 544 = 576 * 2 B.
    plan = moe_plan(DEEPSEEK, 8, 8, 1)
    unit = plan.stages[0][1]
    step = Step(prefill=((256, 256),), decode=4, decode_kv_tokens=4000, sampled=5)
    prefill, decode = plan.attention_kernels(unit, step)
    assert (decode.heads, decode.kv_heads, decode.head_dim, decode.batch, decode.kv_len) == (16, 1, 544, 4, 1000)
    assert decode.kv_width * 2 * 544 == pytest.approx(576 * 2, rel=1e-12)
    # 4 queries over 1000 keys each (causal: 999.5 pairs with the query last), 16 heads.
    assert decode.flops == pytest.approx(4 * 16 * 999.5 * 2 * (576 + 512), rel=1e-12)
    # Prefill: 16 heads of query/key width 128 + 64 = 192 and value width 128: mean 160, K and V too.
    assert (prefill.heads, prefill.kv_heads, prefill.head_dim, prefill.segments) == (16, 16, 160, ((256, 256),))


def test_decode_reads_the_weights_of_the_experts_its_tokens_touch():
    # Mixtral, tp=1, one decode: 8 (1 - (1 - 2/8)^1) = 2 experts touched: a grouped GEMM of 2 groups of one
    # row, reading 2 of the 8 experts' (4096 x 14336) up-projections.
    plan = moe_plan(MIXTRAL, 1, 1, 1, num_gpus=1)
    up = next(k for k in moe_layer(plan, Step(decode=1, decode_kv_tokens=100, sampled=1)).kernels
              if k.grouped and k.n == 14336)
    assert (up.batch, up.m, up.k, up.n) == (2, 1, 4096, 14336)
    # DeepSeek-V3 with attention data parallelism over 8 GPUs (tp=1, ep=8), 4 decodes per replica: the
    # group receives 8 * 4 = 32 tokens, which touch 256 (1 - (1 - 8/256)^32) = 163.31 experts, 20.41 per
    # rank: 20 groups share the rank's 4 * 8 = 32 rows (2 each, rounded up); the up-projection reads
    # 20 * 7168 * 2048 fp8 weights, 293,601,280 B, not the 32 local experts' 469,762,048 B.
    plan = moe_plan(DEEPSEEK, 1, 8, 1)
    up = next(k for k in moe_layer(plan, Step(decode=4, decode_kv_tokens=400, sampled=4)).kernels
              if k.grouped and k.k == 7168)
    assert (up.batch, up.m, up.k, up.n) == (20, 2, 7168, 2048)
    assert up.batch * up.k * up.n * 1.0 == 293_601_280


def test_expert_weights_split_over_ep_and_etp_dense_over_tp():
    # DeepSeek-V3's MoE layer on one rank, fp8 (1 B): the 256 routed experts (3 * 7168 * 2048 each) over
    # ep * etp = 8 GPUs; the router (7168 x 256 and its 256-element routing bias), MLA's down projections
    # (7168 x 1536, 7168 x 576) and the norms (2 * 7168 + 1536 + 512) whole; the shared expert
    # (3 * 7168 * 2048), q_up (1536 x 128 * 192), kv_up (512 x 128 * 256) and the output (128 * 128 x 7168)
    # over tp.
    experts = 256 * 3 * 7168 * 2048 / 8
    whole = 7168 * 256 + 256 + 7168 * 1536 + 7168 * 576 + 2 * 7168 + 1536 + 512
    split = 3 * 7168 * 2048 + 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    for tp, ep, etp in ((8, 1, 8), (8, 8, 1), (1, 8, 1), (2, 4, 2)):
        unit = moe_unit(moe_plan(DEEPSEEK, tp, ep, etp))
        assert unit.params == pytest.approx(experts + whole + split / tp, rel=1e-12), (tp, ep, etp)


def test_expert_exchange_of_a_decode_step_by_hand():
    # DeepSeek-V3, tp=1, ep=8 (attention data parallelism over 8 GPUs), 64 decodes per replica: each rank
    # dispatches its 64 tokens to 8 experts each, 64 * 8 * 7168 elements: 7,340,032 B in bf16, 3,670,016 B
    # in fp8; the combine returns them in bf16. One NVLink domain: Span(8, 1). No TP all-reduce (tp = 1).
    step = Step(decode=64, decode_kv_tokens=64_000, sampled=64)
    comm = moe_layer(moe_plan(DEEPSEEK, 1, 8, 1), step).comm
    assert [(c.label, c.kind, c.size_bytes, c.span) for c in comm] == [
        ("ep.dispatch", Collective.ALL_TO_ALL, 7_340_032, Span(8, 1)),
        ("ep.combine", Collective.ALL_TO_ALL, 7_340_032, Span(8, 1))]
    fp8 = moe_layer(moe_plan(DEEPSEEK, 1, 8, 1, dispatch_fp8=True), step).comm
    assert [c.size_bytes for c in fp8] == [3_670_016, 7_340_032]
    # tp=2, ep=8: 4 replicas share the experts; each rank sends half its replica's tokens (32 * 8 * 7168 * 2 B),
    # after the attention's all-reduce and the shared expert's, which sums the routed outputs too.
    comm = moe_layer(moe_plan(DEEPSEEK, 2, 8, 1), step).comm
    assert [(c.label, c.size_bytes) for c in comm if c.group == "ep"] == [("ep.dispatch", 3_670_016),
                                                                          ("ep.combine", 3_670_016)]
    assert [c.kind for c in comm if c.group == "tp"] == [Collective.ALL_REDUCE] * 2


def test_experts_inside_a_replica_are_summed_by_an_all_reduce():
    # Mixtral at tp=2 (experts split by width, or ep=2 whole experts): every rank holds the step's T tokens
    # and computes its share of every token's experts; no all-to-all, and an all-reduce of T x h (no shared
    # expert to join) after the attention's: 16 tokens * 4096 * 2 B = 131,072 B each.
    step = Step(decode=16, decode_kv_tokens=16_000, sampled=16)
    for ep, etp in ((1, 2), (2, 1)):
        comm = moe_layer(moe_plan(MIXTRAL, 2, ep, etp, num_gpus=2), step).comm
        assert [(c.kind, c.size_bytes) for c in comm] == [(Collective.ALL_REDUCE, 131_072)] * 2
        assert comm[-1].label == "tp.experts_out"


moe_layouts = st.sampled_from([(MIXTRAL, 2, 1, 2, 2, {}), (MIXTRAL, 1, 2, 1, 2, {}),
                               (MIXTRAL, 1, 4, 1, 4, {"ep_overlap": True}), (DEEPSEEK, 1, 8, 1, 8, {}),
                               (DEEPSEEK, 2, 8, 1, 8, {"ep_overlap": True, "dispatch_fp8": True}),
                               (DEEPSEEK, 8, 8, 1, 8, {})])


@settings(max_examples=30, deadline=None)
@given(step=steps, layout=moe_layouts, stack=st.sampled_from(["trtllm", "vllm", "sglang"]))
def test_moe_closed_form_equals_the_simulated_program(step, layout, stack):
    model, tp, ep, etp, n, options = layout
    plan, rt = moe_plan(model, tp, ep, etp, num_gpus=n, **options), runtime(stack)
    built = build_step(plan, rt, step)
    simulated = step_period(built, schedule(built.program), rt.stack.host_step_s, rt.stack.host_overlaps_gpu)
    assert step_time(plan, rt, step) == pytest.approx(simulated, rel=1e-12)


def test_overlapped_exchange_hides_behind_the_layer():
    # Two-batch overlap: a layer takes max(kernels, all-to-all) instead of their sum.
    step = Step(decode=64, decode_kv_tokens=64_000, sampled=64)
    plain, overlapped = moe_plan(DEEPSEEK, 1, 8, 1), moe_plan(DEEPSEEK, 1, 8, 1, ep_overlap=True)
    rt = runtime()
    a, b = stage_times(plain, rt, 0, step), stage_times(overlapped, rt, 0, step)
    assert a.compute_s == b.compute_s and a.comm_s == b.comm_s and a.hidden_s == 0
    assert b.total_s == pytest.approx(a.total_s - b.hidden_s, rel=1e-12) and b.hidden_s > 0


adp_layouts = st.sampled_from([(MIXTRAL, 1, 4, 1, 4, {}), (DEEPSEEK, 1, 8, 1, 8, {}),
                               (DEEPSEEK, 2, 8, 1, 8, {"ep_overlap": True, "dispatch_fp8": True}),
                               (DEEPSEEK, 1, 8, 1, 8, {"ep_overlap": True})])


@settings(max_examples=25, deadline=None)
@given(step=steps, layout=adp_layouts, stack=st.sampled_from(["trtllm", "vllm", "sglang"]))
def test_an_engine_whose_ranks_run_one_step_is_the_replica_step(step, layout, stack):
    # Every rank running the same step: the group's closed form is step_time's (the ranks' maxima are the step).
    model, tp, ep, etp, n, options = layout
    plan, rt = moe_plan(model, tp, ep, etp, num_gpus=n, **options), runtime(stack)
    a = plan.experts.attention_dp
    assert group_step_time(plan, rt, (step,) * a) == pytest.approx(step_time(plan, rt, step), rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(ranks=st.lists(steps, min_size=8, max_size=8), layout=adp_layouts.filter(lambda x: x[4] == 8),
       stack=st.sampled_from(["trtllm", "vllm", "sglang"]))
def test_an_attention_dp_step_is_never_faster_than_its_busiest_rank_alone(ranks, layout, stack):
    # The other ranks' tokens only add expert rows and keep the exchange no smaller: the step of all eight ranks
    # takes at least the step of its busiest rank beside seven idle ones, and at least each rank's alone.
    model, tp, ep, etp, n, options = layout
    plan, rt = moe_plan(model, tp, ep, etp, num_gpus=n, **options), runtime(stack)
    ranks = tuple(ranks[: plan.experts.attention_dp])
    together = group_step_time(plan, rt, ranks)
    for i in range(len(ranks)):
        alone = tuple(s if j == i else Step() for j, s in enumerate(ranks))
        assert together >= group_step_time(plan, rt, alone) * (1 - 1e-12)


def test_expert_rows_of_an_unbalanced_step_by_hand():
    # DeepSeek-V3, tp=1, ep=8: rank 0 prefills 1000 tokens, rank 1 decodes 24, the other six idle. The experts
    # see 1024 tokens in all: R = 1024 * 8 / 8 = 1024 rows per rank (256 (1 - (1 - 8/256)^1024) = 256 experts
    # touched, all 32 local ones: 32 groups of 32 rows). The exchange is the busiest rank's: 1000 * 8 * 7168
    # elements of 2 B = 114,688,000 B per dispatch.
    plan = moe_plan(DEEPSEEK, 1, 8, 1)
    layer = next(w for w in plan.expert_work(0, 1024, 1000) if w.kernels)
    up = next(k for k in layer.kernels if k.grouped and k.k == 7168)
    assert (up.batch, up.m) == (32, 32)
    assert [(c.label, c.size_bytes) for c in layer.comm] == [("ep.dispatch", 114_688_000), ("ep.combine", 114_688_000)]
    # The ranks' own work and the shared work hold the replica's work when every rank runs one step of T tokens.
    step = Step(decode=64, decode_kv_tokens=64_000, sampled=64)
    parts = zip(plan.rank_work(0, 64, 64), plan.expert_work(0, 8 * 64, 64), plan.dense_work(0, 64, 64), strict=True)
    for mine, shared, whole in parts:
        assert sorted(map(repr, mine.kernels + shared.kernels)) == sorted(map(repr, whole.kernels))
        assert sorted(map(repr, mine.comm + shared.comm)) == sorted(map(repr, whole.comm))
    assert group_step_time(plan, runtime(), (step,) * 8) == pytest.approx(step_time(plan, runtime(), step), rel=1e-12)
