"""Recommendation models (DLRM, DCNv2) as blocks of ops, written per sample.

The token axis of `Op` is the sample here: a DLRM has no sequence, so every op is per sample and the
plan's "tokens" are the samples of a micro-batch (sequence length 1).

Blocks in execution order (torchrec's DLRM forward; Naumov et al. 2019, arXiv 1906.00091, Fig. 1):
- embedding: one embedding bag per table group: `pooling` rows of `dim` elements gathered and summed
  per table per sample, a memory-bound gather (pooling * dim elements read, dim written), not a GEMM.
  It comes first so that its all-to-all can overlap the bottom MLP (torchrec's train pipeline).
- bottom_mlp: dense features through Linear+ReLU layers; layer k -> n costs 2*k*n FLOPs per sample.
- interaction: dot: the F+1 vectors (bottom output and F pooled embeddings, width d) stacked into a
  (F+1) x d matrix X per sample, Z = X X^T a memory-bound batched product, 2 (F+1)^2 d FLOPs per sample (the
  symmetric half, (F+1)^2 d, is the useful part; the bmm computes all of it), then the strict upper
  triangle, C(F+1, 2) values, is gathered and concatenated to the bottom output. dcnv2: the
  concatenation x_0 of width N through cross layers x_{l+1} = x_0 * (U_l V_l x_l + b_l) + x_l:
  two GEMMs N -> r -> N per layer (4 N r FLOPs) or one N -> N at full rank (Wang et al. 2021,
  arXiv 2008.13535, Eq. 1 and Sec. 3.3). none: no op (the MAD-Max reference's proxies).
- top_mlp: Linear+ReLU layers, the last without ReLU, then the sigmoid and binary cross-entropy.

Saved activations per sample (elements): every GEMM keeps its input; a ReLU's output is the next
GEMM's saved input and is not counted twice; a cross layer keeps x_l (its first GEMM's input), the
rank-r middle and U V x_l + b (for the gradient of x_0); the dot interaction keeps X; the loss keeps
the logit. Embedding bags keep only their integer indices, not counted.
"""

from __future__ import annotations

import dataclasses
from math import comb

from madmax.config.dlrm import DLRMModel, EmbeddingTable, Interaction
from madmax.config.task import FinetuneMethod, Task, TaskKind
from madmax.errors import ConfigError
from madmax.workload.blocks import READ_WRITE
from madmax.workload.ops import Block, Op, OpKind, Placement, TableSpec, TPSplit, Workload

# Sigmoid (exp, add, reciprocal), log-loss (log, multiply-add) and its gradient (subtract): a handful
# of FLOPs per logit, negligible next to the MLPs.
SIGMOID_BCE_FLOPS = 8
# A cross layer's mix x_0 * (y + b) + x_l: add, multiply, add per feature; reads x_0, y, x_l, writes one.
CROSS_MIX_FLOPS = 3
CROSS_MIX_TENSORS = 4


def mlp_ops(prefix: str, in_width: int, widths: list[int], *, relu_last: bool) -> list[Op]:
    """Linear (with bias) + ReLU layers: layer i is (samples x k) @ (k x n), 2*k*n FLOPs per sample,
    k*n + n parameters, and keeps its input (k elements). Tensor parallelism, when the plan applies
    it, pairs the layers Megatron-style: even layers split by column, odd ones by row."""
    ops: list[Op] = []
    k = in_width
    for i, n in enumerate(widths):
        column = i % 2 == 0
        ops.append(Op(name=f"{prefix}.fc{i}", kind=OpKind.GEMM, tp=TPSplit.COLUMN if column else TPSplit.ROW,
                      k=k, n=n, params=k * n + n, saved_elems_per_token=k, saved_outside_tp=column))
        if relu_last or i < len(widths) - 1:
            ops.append(Op(name=f"{prefix}.relu{i}", kind=OpKind.ELEMENTWISE,
                          tp=TPSplit.TP_REGION if column else TPSplit.SEQUENCE,
                          moved_elems_per_token=READ_WRITE * n, flops_per_token=n))
        k = n
    return ops


def embedding_bag_op(index: int, table: EmbeddingTable) -> Op:
    """Embedding bags of one table group: per sample and table, `pooling` rows of `dim` elements
    read and summed into one pooled vector written: count * dim * (pooling + 1) elements moved at
    the table's dtype, count * dim * pooling additions. `n` is the pooled width, count * dim.
    Sharding (table-, row-, column-wise) is not tensor parallelism: the op is a TABLE op, which
    `madmax.parallel.embedding` places and costs."""
    width = table.dim * table.count
    return Op(name=f"embedding.group{index}", kind=OpKind.EMBEDDING, tp=TPSplit.TABLE, n=width,
              moved_elems_per_token=width * (table.pooling + 1), flops_per_token=width * table.pooling,
              params=table.params)


def dot_interaction_ops(model: DLRMModel) -> list[Op]:
    """Pairwise dots of the F+1 vectors of width d: stack (read and write (F+1) d, keep X), the
    batched product Z = X X^T, one (F+1) x d by d x (F+1) product per sample: 2 (F+1)^2 d FLOPs over
    (F+1) d elements read and (F+1)^2 written, about 10 FLOPs per byte at 4 bytes per element, below
    every GPU's ridge point, so it is costed as the memory-bound kernel it is (batched GEMMs of 27 x 128
    matrices, or the fused interaction kernels of NVIDIA's DLRM implementations) and not as one GEMM of
    width F+1, which the GEMM model would run at a few percent of peak; its backward, dX = (dZ + dZ^T) X,
    moves about twice the bytes. Then the gather of the upper triangle: read (F+1)^2 + d, write d +
    C(F+1, 2)."""
    d, v = model.bottom_mlp[-1], model.num_tables + 1
    pairs = comb(v, 2)
    return [
        Op(name="interaction.stack", kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED,
           moved_elems_per_token=READ_WRITE * v * d, saved_elems_per_token=v * d),
        Op(name="interaction.dot", kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED,
           moved_elems_per_token=v * d + v * v, flops_per_token=2 * v * v * d),
        Op(name="interaction.triu", kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED,
           moved_elems_per_token=v * v + READ_WRITE * d + pairs),
    ]


def dcn_interaction_ops(model: DLRMModel) -> list[Op]:
    """DCNv2 cross network on x_0 = [bottom output, pooled embeddings] of width N: per layer V (N x r)
    and U (r x N) GEMMs, or one W (N x N) at full rank, then the mix x_0 * (y + b) + x_l with its
    bias b (N). Parameters per layer: 2 N r + N (low rank) or N^2 + N (torchrec LowRankCrossNet)."""
    n_feat, r = model.interaction_width, model.low_rank
    assert model.num_cross_layers is not None  # checked by the schema
    ops = [Op(name="interaction.concat", kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED,
              moved_elems_per_token=READ_WRITE * n_feat)]
    for layer in range(model.num_cross_layers):
        name = f"interaction.cross{layer}"
        if r is None:
            ops.append(Op(name=f"{name}.w", kind=OpKind.GEMM, tp=TPSplit.REPLICATED, k=n_feat, n=n_feat,
                          params=n_feat * n_feat, saved_elems_per_token=n_feat))
        else:
            ops += [Op(name=f"{name}.v", kind=OpKind.GEMM, tp=TPSplit.REPLICATED, k=n_feat, n=r,
                       params=n_feat * r, saved_elems_per_token=n_feat),
                    Op(name=f"{name}.u", kind=OpKind.GEMM, tp=TPSplit.REPLICATED, k=r, n=n_feat,
                       params=r * n_feat, saved_elems_per_token=r)]
        ops.append(Op(name=f"{name}.mix", kind=OpKind.ELEMENTWISE, tp=TPSplit.REPLICATED,
                      moved_elems_per_token=CROSS_MIX_TENSORS * n_feat, flops_per_token=CROSS_MIX_FLOPS * n_feat,
                      params=n_feat, saved_elems_per_token=n_feat))
    return ops


def interaction_ops(model: DLRMModel) -> list[Op]:
    if model.interaction is Interaction.DOT:
        return dot_interaction_ops(model)
    if model.interaction is Interaction.DCNV2:
        return dcn_interaction_ops(model)
    return []


def loss_op(outputs: int) -> Op:
    """Sigmoid and binary cross-entropy on the logits: read the logit, write the loss; keeps the logit."""
    return Op(name="top.loss", kind=OpKind.ELEMENTWISE, tp=TPSplit.SEQUENCE,
              moved_elems_per_token=READ_WRITE * outputs, flops_per_token=SIGMOID_BCE_FLOPS * outputs,
              saved_elems_per_token=outputs)


def _blocks(model: DLRMModel) -> list[Block]:
    embedding = [embedding_bag_op(i, t) for i, t in enumerate(model.tables)]
    bottom = mlp_ops("bottom", model.num_dense_features, model.bottom_mlp, relu_last=True)
    top = [*mlp_ops("top", model.interaction_width, model.top_mlp, relu_last=False), loss_op(model.top_mlp[-1])]
    # The bottom MLP reads the dense features, not the embeddings: the pooled-embedding exchange can
    # run beside it (Mudigere et al. 2022, Sec. 4.3); the interaction reads both.
    blocks = [Block("embedding", tuple(embedding), is_layer=False, consumes=(), placement=Placement.FIRST),
              Block("bottom_mlp", tuple(bottom), consumes=())]
    inter = interaction_ops(model)
    if inter:
        blocks.append(Block("interaction", tuple(inter), consumes=("embedding", "bottom_mlp")))
        blocks.append(Block("top_mlp", tuple(top), consumes=("interaction",)))
    else:
        blocks.append(Block("top_mlp", tuple(top), consumes=("embedding", "bottom_mlp")))
    return blocks


def param_counts(model: DLRMModel) -> dict[str, int]:
    """Parameters by component: embedding (sum rows*dim*count), bottom_mlp, interaction, top_mlp."""
    counts = {"embedding": 0, "bottom_mlp": 0, "interaction": 0, "top_mlp": 0}
    for block in _blocks(model):
        counts[block.name] = block.params
    return counts


def build(model: DLRMModel, task: Task, *, flash: bool = True) -> Workload:
    """The workload of `model` for `task`, per sample. `flash` is accepted for the common signature
    and unused (no attention). Fine-tuning is full: LoRA and frozen layers are decoder notions."""
    del flash
    if task.kind is TaskKind.FINETUNE and (task.finetune is FinetuneMethod.LORA or task.frozen_layers):
        raise ConfigError(f"task.finetune={task.finetune.value!r} with frozen_layers={task.frozen_layers} "
                          f"does not apply to the dlrm model {model.name}; allowed: finetune 'full', frozen_layers 0")
    if task.seq_len not in (None, 1):
        raise ConfigError(f"task.seq_len={task.seq_len} does not apply to the dlrm model {model.name}: a sample "
                          "has no sequence; allowed: 1 or unset")
    e = model.embedding_dtype.num_bytes
    tables = tuple(TableSpec(t.rows, t.dim, t.pooling, e, f"group{g}.{i}", t.sharding, t.zipf)
                   for g, t in enumerate(model.tables) for i in range(t.count))
    blocks = _blocks(model)
    if task.kind is TaskKind.INFERENCE:  # forward only: nothing trains, nothing is kept for a backward
        blocks = [dataclasses.replace(b, trainable=False,
                                      ops=tuple(dataclasses.replace(op, trainable=False) for op in b.ops))
                  for b in blocks]
    return Workload(name=model.name, blocks=tuple(blocks), params_by_component=param_counts(model),
                    tables=tables, accumulates_gradients=False, generates_tokens=False)
