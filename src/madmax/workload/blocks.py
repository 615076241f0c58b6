"""Building blocks shared by model families: attention, feed-forward, norms, embeddings, LM head.

Each returns forward ops per token (see `Op`). Saved activations follow Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models", Sec. 4.1), counted in elements:
their 34*s*b*h bytes per layer at 2 bytes per element are 17*h elements per token.
"""

from __future__ import annotations

import dataclasses

from madmax.workload.ops import Op, OpKind, TPSplit

# Read the input, write the output: an element-wise op moves two tensors.
READ_WRITE = 2
# Sampling reads the logits twice (max and exponential sum, then the draw) and writes the probabilities.
SAMPLING_PASSES = 3
# Megatron-LM's unfused core attention launches baddbmm, the fused scale-mask-softmax, the dropout,
# bmm and a permute copy: 5 kernels, of which the score products and the softmax pass are costed.
UNFUSED_ATTENTION_AUX = 3


def norm_op(name: str, hidden: int, params_per_feature: int, dropout: bool = False) -> Op:
    """LayerNorm/RMSNorm over `hidden` features; saves its input (h elements per token).

    params_per_feature: 2 for LayerNorm (gain and bias), 1 for RMSNorm.
    """
    return Op(name=name, kind=OpKind.ELEMENTWISE, tp=TPSplit.SEQUENCE,
              moved_elems_per_token=READ_WRITE * hidden, flops_per_token=5 * hidden,
              params=params_per_feature * hidden, saved_elems_per_token=hidden)


def residual_op(name: str, hidden: int, dropout: bool, branches: int = 1) -> Op:
    """Residual add of `branches` block outputs to the residual stream (read branches + 1 tensors, write
    one; `branches` adds per feature): 1 for a sequential sub-layer, 2 for a parallel layer (attention
    and FFN outputs). Each branch may pass a dropout that keeps a 1-byte mask (half an element) per
    feature (Korthikanti Sec. 4.1) and is one more kernel."""
    return Op(name=name, kind=OpKind.ELEMENTWISE, tp=TPSplit.SEQUENCE,
              moved_elems_per_token=(branches + 2) * hidden, flops_per_token=branches * hidden,
              saved_elems_per_token=branches * hidden / 2 if dropout else 0.0,
              aux_kernels=branches if dropout else 0)


def qk_norm_ops(layer: str, heads: int, kv_heads: int, head_dim: int) -> list[Op]:
    """RMSNorm of every query head and every key head over its head_dim features (Qwen3, Gemma 3).

    One weight of head_dim elements each for queries and keys, shared by the heads: 2*head_dim
    parameters per layer. Each norm reads and writes its heads' features (a*d queries, g*d keys per
    token), does 5 FLOPs per feature like `norm_op`, and saves its input for backward. It runs inside
    the tensor-parallel region, on the rank's heads.
    """
    return [Op(name=f"{layer}.{part}_norm", kind=OpKind.ELEMENTWISE, tp=TPSplit.TP_REGION,
               moved_elems_per_token=READ_WRITE * width, flops_per_token=5 * width, params=head_dim,
               saved_elems_per_token=width)
            for part, width in (("q", heads * head_dim), ("k", kv_heads * head_dim))]


def attention_ops(layer: str, hidden: int, heads: int, kv_heads: int, head_dim: int, *,
                  bias: bool, qkv_bias: bool, dropout: bool, flash: bool, window: int | None = None,
                  causal: bool = True) -> list[Op]:
    """Self-attention with grouped-query heads: QKV projection, attention core, output projection.

    QKV: (tokens x h) @ (h x (a + 2g) d), one fused GEMM (separate Q, K, V projections have the same
    parameters and FLOPs); core: scores and values, 4*s*a*d FLOPs per token, halved by causality
    (`causal`; an encoder's bidirectional attention, `causal=False`, computes the whole square), or
    fewer with a sliding `window` (tokens each query attends to, see `Op.forward_flops`); output
    projection: (tokens x a d) @ (a d x h). Saved: the QKV input (h), Q, K, V ((a + 2g) d), the
    output-projection input (a d); a non-fused core also keeps the softmax output (a*s per token),
    plus a dropout mask and dropped copy (1.5*a*s) with attention dropout.
    """
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    qkv_n = q_dim + 2 * kv_dim
    # softmax output (1 element per score); with dropout also its 1-byte mask and the dropped copy
    per_seq = 0.0 if flash else heads * ((1 + 1 / 2 + 1) if dropout else 1)
    return [
        Op(name=f"{layer}.qkv", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=hidden, n=qkv_n,
           params=hidden * qkv_n + (qkv_n if bias or qkv_bias else 0),
           saved_elems_per_token=hidden, saved_outside_tp=True, lora_target="qkv"),
        Op(name=f"{layer}.attn", kind=OpKind.ATTENTION, tp=TPSplit.HEADS, heads=heads, kv_heads=kv_heads,
           head_dim=head_dim, causal=causal, saved_elems_per_token=qkv_n, window=window,
           saved_elems_per_token_per_seq=per_seq, aux_kernels=0 if flash else UNFUSED_ATTENTION_AUX),
        Op(name=f"{layer}.out", kind=OpKind.GEMM, tp=TPSplit.ROW, k=q_dim, n=hidden,
           params=q_dim * hidden + (hidden if bias else 0), saved_elems_per_token=q_dim,
           lora_target="out"),
    ]


def ffn_ops(layer: str, hidden: int, ffn_hidden: int, *, gated: bool, bias: bool) -> list[Op]:
    """Feed-forward block: up (and gate) (h x f), activation, down (f x h).

    Each GEMM costs 2*h*f FLOPs per token; gated FFNs (SwiGLU, Shazeer 2020, arXiv 2002.05202) have
    three matrices, plain ones two. Saved: the up input (h), the activation input (f, or gate and up
    outputs 2f when gated), the down input (f).
    """
    ops = [Op(name=f"{layer}.up", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=hidden, n=ffn_hidden,
              params=hidden * ffn_hidden + (ffn_hidden if bias else 0),
              saved_elems_per_token=hidden, saved_outside_tp=True, lora_target="up")]
    if gated:
        ops.append(Op(name=f"{layer}.gate", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=hidden, n=ffn_hidden,
                      params=hidden * ffn_hidden + (ffn_hidden if bias else 0), lora_target="gate"))
    act_in = (2 if gated else 1) * ffn_hidden
    ops.append(Op(name=f"{layer}.act", kind=OpKind.ELEMENTWISE, tp=TPSplit.TP_REGION,
                  moved_elems_per_token=act_in + ffn_hidden, flops_per_token=8 * ffn_hidden,
                  saved_elems_per_token=act_in))
    ops.append(Op(name=f"{layer}.down", kind=OpKind.GEMM, tp=TPSplit.ROW, k=ffn_hidden, n=hidden,
                  params=ffn_hidden * hidden + (hidden if bias else 0), saved_elems_per_token=ffn_hidden,
                  lora_target="down"))
    return ops


def embedding_op(name: str, rows: int, hidden: int) -> Op:
    """Embedding lookup: gather h elements per token from a (rows x h) table (a memory-bound gather,
    not a GEMM); split over tp by rows (vocabulary-parallel)."""
    return Op(name=name, kind=OpKind.EMBEDDING, tp=TPSplit.VOCAB, n=hidden,
              moved_elems_per_token=READ_WRITE * hidden, params=rows * hidden)


def lm_head_ops(hidden: int, vocab: int, *, params: int) -> list[Op]:
    """LM head (h x V) GEMM, vocabulary-parallel, and the cross-entropy over the logits.

    The loss reads the logits a few times (max, exp-sum, gradient) and keeps the fp32 softmax for
    backward: 2 elements of 2 bytes per logit. `params`: the head's own parameters, V*h (+ V for a
    bias, GPT-J), without the V*h when the head is tied to the embedding.
    """
    return [
        Op(name="head.lm", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=hidden, n=vocab, params=params,
           saved_elems_per_token=hidden, saved_outside_tp=True),
        Op(name="head.loss", kind=OpKind.ELEMENTWISE, tp=TPSplit.TP_REGION,
           moved_elems_per_token=4 * vocab, flops_per_token=5 * vocab, saved_elems_per_token=2 * vocab),
    ]


def sampling_op(vocab: int) -> Op:
    """Sampling of the next token from the gathered logits of a sequence (inference): softmax and top-k /
    top-p over V logits, read twice (max and sum of exponentials, then the draw) and the probabilities
    written once: 3*V elements moved, a few FLOPs per logit. Every tensor-parallel rank samples the same
    token from the full vocabulary (replicated)."""
    return Op(name="head.sample", kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED,
              moved_elems_per_token=SAMPLING_PASSES * vocab, flops_per_token=5 * vocab)


def lora_ops(base: Op, rank: int) -> list[Op]:
    """LoRA adapter of `base` (Hu et al. 2021, arXiv 2106.09685): A (k x r) then B (r x n), trainable.

    Splits follow the base op: a column-parallel base shards B by column; a row-parallel one shards A
    by row; the rank dimension stays whole.
    """
    a_split = TPSplit.ROW if base.tp is TPSplit.ROW else TPSplit.REPLICATED
    b_split = TPSplit.COLUMN if base.tp is TPSplit.COLUMN else TPSplit.REPLICATED
    return [
        Op(name=f"{base.name}.lora_a", kind=OpKind.GEMM, tp=a_split, k=base.k, n=rank, params=base.k * rank,
           saved_elems_per_token=0.0),
        Op(name=f"{base.name}.lora_b", kind=OpKind.GEMM, tp=b_split, k=rank, n=base.n, params=rank * base.n,
           saved_elems_per_token=rank),
    ]


def mla_attention_ops(layer: str, hidden: int, heads: int, *, q_lora_rank: int | None, kv_lora_rank: int,
                      qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int, norm_params: int,
                      window: int | None = None) -> list[Op]:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1), as trained (not absorbed).

    q_down (h x r_q), its RMSNorm, q_up (r_q x a*(d_n + d_r)) -- or one q projection (h x a*(d_n + d_r))
    without a query latent; kv_down (h x (r_kv + d_r)): the KV latent and the one rotary key shared by all
    heads, its RMSNorm over r_kv, kv_up (r_kv x a*(d_n + d_v)); the attention core over heads of query/key
    width d_n + d_r and value width d_v; the output projection (a*d_v x h). The down projections and
    latent norms are computed whole on every tensor-parallel rank (Megatron-Core duplicates them); the up
    projections are column-parallel, the output row-parallel. Saved: the hidden state (h), the latents,
    Q, K, V and the output-projection input.
    """
    qk = qk_nope_head_dim + qk_rope_head_dim
    ops: list[Op] = []
    if q_lora_rank:
        ops += [Op(name=f"{layer}.q_down", kind=OpKind.GEMM, tp=TPSplit.DUPLICATED, k=hidden, n=q_lora_rank,
                   params=hidden * q_lora_rank, saved_elems_per_token=hidden, saved_outside_tp=True,
                   lora_target="qkv"),
                _latent_norm(f"{layer}.q_latent_norm", q_lora_rank, norm_params),
                Op(name=f"{layer}.q_up", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=q_lora_rank, n=heads * qk,
                   params=q_lora_rank * heads * qk, saved_elems_per_token=q_lora_rank, saved_outside_tp=True)]
    else:
        ops.append(Op(name=f"{layer}.q_proj", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=hidden, n=heads * qk,
                      params=hidden * heads * qk, saved_elems_per_token=hidden, saved_outside_tp=True,
                      lora_target="qkv"))
    kv_n = kv_lora_rank + qk_rope_head_dim
    ops += [Op(name=f"{layer}.kv_down", kind=OpKind.GEMM, tp=TPSplit.DUPLICATED, k=hidden, n=kv_n,
               params=hidden * kv_n),
            _latent_norm(f"{layer}.kv_latent_norm", kv_lora_rank, norm_params),
            Op(name=f"{layer}.kv_up", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=kv_lora_rank,
               n=heads * (qk_nope_head_dim + v_head_dim), params=kv_lora_rank * heads * (qk_nope_head_dim + v_head_dim),
               saved_elems_per_token=kv_lora_rank, saved_outside_tp=True),
            Op(name=f"{layer}.attn", kind=OpKind.ATTENTION, tp=TPSplit.HEADS, heads=heads, kv_heads=heads,
               head_dim=qk, v_head_dim=v_head_dim, causal=True, window=window,
               saved_elems_per_token=heads * (2 * qk + v_head_dim)),
            Op(name=f"{layer}.out", kind=OpKind.GEMM, tp=TPSplit.ROW, k=heads * v_head_dim, n=hidden,
               params=heads * v_head_dim * hidden, saved_elems_per_token=heads * v_head_dim, lora_target="out")]
    return ops


def _latent_norm(name: str, width: int, params_per_feature: int) -> Op:
    """RMSNorm of an MLA latent, computed whole on every tensor-parallel rank."""
    return Op(name=name, kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED, moved_elems_per_token=READ_WRITE * width,
              flops_per_token=5 * width, params=params_per_feature * width, saved_elems_per_token=width)


def moe_ops(layer: str, hidden: int, *, num_experts: int, top_k: int, expert_ffn: int, gated: bool,
            expert_bias: bool, router_bias: bool, shared_ffn: int, shared_gate: bool, shared_bias: bool,
            route_groups: int = 1, route_group_topk: int = 0, glu_limit: float | None = None) -> list[Op]:
    """A mixture-of-experts FFN (Shazeer et al. 2017; Fedus et al. 2021; Megatron-Core MoE layer).

    router: (h x E) logits on the rank's tokens (outside the TP region; fp32 logits kept, E per token);
    permute: each token copied once per chosen expert, grouped by expert (reads h, writes k*h); the
    routed experts' up (and gate), activation and down GEMMs on those k rows per token (grouped GEMMs
    over the rank's local experts, `experts` matrices of which each row uses one); unpermute: the k
    expert outputs of each token weighted by its router probabilities and summed (reads k*h, writes h).
    Shared experts (always on; DeepSeek, Qwen2-MoE) are a tensor-parallel FFN of `shared_ffn` beside
    them, optionally scaled by a sigmoid gate (h x 1). A gated expert with `glu_limit` L clamps its gate
    input to at most L and its linear input to [-L, L] before the activation (GPT-OSS; the op's
    `glu_clamp`, which a training stack may run as eager kernels). The token exchange between
    expert-parallel ranks (dispatch, combine) is the plan's, not an op.
    """
    act_in = (2 if gated else 1) * expert_ffn
    ops = [Op(name=f"{layer}.router", kind=OpKind.GEMM, tp=TPSplit.SEQUENCE, k=hidden, n=num_experts,
              params=hidden * num_experts + (num_experts if router_bias else 0),
              saved_elems_per_token=hidden + num_experts),
           Op(name=f"{layer}.permute", kind=OpKind.ELEMENTWISE, tp=TPSplit.SEQUENCE,
              moved_elems_per_token=hidden + top_k * hidden)]
    if shared_ffn:
        shared = ffn_ops(f"{layer}.shared", hidden, shared_ffn, gated=gated, bias=shared_bias)
        ops += [dataclasses.replace(op, name=op.name.replace(".shared.", ".shared_"), lora_target=None)
                for op in shared]
        if shared_gate:
            ops.append(Op(name=f"{layer}.shared_expert_gate", kind=OpKind.GEMM, tp=TPSplit.SEQUENCE, k=hidden, n=1,
                          params=hidden))
    bias = expert_bias
    ops.append(Op(name=f"{layer}.expert_up", kind=OpKind.GEMM, tp=TPSplit.EXPERT_COLUMN, k=hidden, n=expert_ffn,
                  params=num_experts * (hidden * expert_ffn + (expert_ffn if bias else 0)), experts=num_experts,
                  top_k=top_k, saved_elems_per_token=top_k * hidden, route_groups=route_groups,
                  route_group_topk=route_group_topk))
    if gated:
        ops.append(Op(name=f"{layer}.expert_gate", kind=OpKind.GEMM, tp=TPSplit.EXPERT_COLUMN, k=hidden,
                      n=expert_ffn, params=num_experts * (hidden * expert_ffn + (expert_ffn if bias else 0)),
                      experts=num_experts, top_k=top_k))
    ops += [Op(name=f"{layer}.expert_act", kind=OpKind.ELEMENTWISE, tp=TPSplit.EXPERT_REGION,
               moved_elems_per_token=top_k * (act_in + expert_ffn), flops_per_token=8 * top_k * expert_ffn,
               saved_elems_per_token=top_k * act_in, top_k=top_k, glu_clamp=gated and glu_limit is not None),
            Op(name=f"{layer}.expert_down", kind=OpKind.GEMM, tp=TPSplit.EXPERT_ROW, k=expert_ffn, n=hidden,
               params=num_experts * (expert_ffn * hidden + (hidden if bias else 0)), experts=num_experts,
               top_k=top_k, saved_elems_per_token=top_k * expert_ffn),
            Op(name=f"{layer}.unpermute", kind=OpKind.ELEMENTWISE, tp=TPSplit.SEQUENCE,
               moved_elems_per_token=top_k * hidden + hidden, flops_per_token=2 * top_k * hidden,
               saved_elems_per_token=top_k)]
    return ops
