"""The vocabulary of workloads: operators with FLOPs, bytes, parameters and saved activations.

Ops are written per token of a micro-batch, so one workload serves every batch size and sequence
length: a GEMM is (tokens x k) @ (k x n); an attention core is described by its heads and widths and
gets its sequence length from the plan. The plan (`madmax.parallel`) divides ops by the axes they
declare and the cost models (`madmax.hardware`) turn them into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from madmax.workload.attention import attention_pairs


class OpKind(StrEnum):
    """What runs, which decides the cost model: GEMMs and attention are compute-bound rooflines,
    the rest move bytes (norms, activations, residual adds, embedding gathers, the optimizer)."""

    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    EMBEDDING = "embedding"
    OPTIMIZER = "optimizer"


class TPSplit(StrEnum):
    """How Megatron tensor parallelism divides an op among the `tp` ranks.

    COLUMN: the output width n (QKV, FFN up/gate, LM head over the vocabulary); ROW: the input width k
    (attention output, FFN down), followed by a reduction; HEADS: attention heads; TP_REGION: an
    element-wise op inside the TP region (on n/tp features); SEQUENCE: an op outside the TP region
    (element-wise, or the MoE router), split by tp only under sequence parallelism (on T/tp tokens),
    otherwise replicated; VOCAB: embedding rows; REPLICATED: computed whole on every tp rank (small LoRA
    matrices, MLA's latent norms); DUPLICATED: a GEMM on the full hidden state computed whole on every tp
    rank that opens the TP region like a column-parallel one (MLA's down projections: under sequence
    parallelism its input is gathered); TABLE: an embedding table that the embedding-sharding plan places
    on ranks (table-, row-, column-wise), not tensor parallelism. EXPERT_COLUMN / EXPERT_ROW /
    EXPERT_REGION: routed-expert GEMMs and their activation, on the rows the rank's local experts receive,
    with widths split by expert tensor parallelism (etp) instead of tp.
    """

    COLUMN = "column"
    ROW = "row"
    HEADS = "heads"
    TP_REGION = "tp_region"
    SEQUENCE = "sequence"
    VOCAB = "vocab"
    REPLICATED = "replicated"
    TABLE = "table"
    DUPLICATED = "duplicated"
    EXPERT_COLUMN = "expert_column"
    EXPERT_ROW = "expert_row"
    EXPERT_REGION = "expert_region"


EXPERT_SPLITS = (TPSplit.EXPERT_COLUMN, TPSplit.EXPERT_ROW, TPSplit.EXPERT_REGION)


@dataclass(frozen=True, slots=True)
class Op:
    """One forward operator of one layer, per token of a micro-batch.

    GEMM: (tokens x k) @ (k x n), 2*k*n FLOPs per token; a routed-expert GEMM (`experts` > 0) holds
    `experts` such matrices and each token runs `top_k` of them: 2*k*n*top_k FLOPs per token.
    ATTENTION: `heads` query heads and `kv_heads` key/value heads of width `head_dim` (values
    `v_head_dim` wide when they differ, MLA) over the sequence (its FLOPs depend on the sequence length:
    2*s*heads*(head_dim + v_head_dim) per token, halved when causal). Memory-bound ops move
    `moved_elems_per_token` activation elements (read plus write) and do `flops_per_token`.
    saved_elems_per_token: activation elements kept for the backward pass (Korthikanti et al. 2022,
    Sec. 4.1); `saved_elems_per_token_per_seq` times the sequence length is the part that grows with
    it (the s^2 attention scores of a non-fused attention). `saved_outside_tp`: the saved tensor is the
    (replicated) input of a column-parallel GEMM, divided by tp only under sequence parallelism.
    `trainable`: False for frozen weights (no weight gradient, no optimizer state).
    `aux_kernels`: small kernels the framework launches around the op in each pass (layout copies,
    masks, dropout) whose cost is their launch, not their bytes.
    `window`: attention only, the tokens each query attends to back, itself included (a sliding-window
    layer); None: the whole causal prefix.
    `merges_reduction`: a row-parallel GEMM whose partial output is summed with the next row-parallel
    GEMM's output before a single reduction (parallel attention and FFN: GPT-J, Falcon); the planner
    emits one reduction for the pair.
    """

    name: str
    kind: OpKind
    tp: TPSplit
    k: int = 0
    n: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    causal: bool = True
    moved_elems_per_token: float = 0.0
    flops_per_token: float = 0.0
    params: int = 0
    saved_elems_per_token: float = 0.0
    saved_elems_per_token_per_seq: float = 0.0
    saved_outside_tp: bool = False
    trainable: bool = True
    lora_target: str | None = None
    aux_kernels: int = 0
    window: int | None = None
    merges_reduction: bool = False
    experts: int = 0
    top_k: int = 0
    v_head_dim: int = 0
    # Group-limited routing of a routed-expert op: top_k experts from the best route_group_topk of
    # route_groups groups (0: no limit).
    route_groups: int = 1
    route_group_topk: int = 0
    # A GLU activation whose gate and linear inputs are clamped first (GPT-OSS swiglu_limit).
    glu_clamp: bool = False

    @property
    def value_dim(self) -> int:
        """Width of one value head (the query/key width unless MLA gives another)."""
        return self.v_head_dim or self.head_dim

    @property
    def routed(self) -> int:
        """Matrices each token multiplies by: top_k for a routed-expert op, else 1."""
        return self.top_k if self.experts else 1

    def forward_flops(self, tokens: int, seq_len: int) -> float:
        """Forward FLOPs of this op over `tokens` tokens of sequences of length `seq_len` (unsharded).

        Attention does 4*d FLOPs per (query, key) pair and head (Q K^T and P V, 2*d each). Pairs per
        sequence of s tokens, in the continuous convention (causal: s^2/2, not s(s+1)/2):
            causal, no window:  P = s^2/2
            window w:           P = s^2/2 if s <= w, else s*w - w^2/2
        (query i attends to min(i, w) keys; the integral of min(x, w) over [0, s]; `attention_pairs`).
        A non-causal attention has P = s^2. FLOPs = tokens * 2*(d + d_v)*heads * P/s (4*d*heads when
        the value width d_v equals d).
        """
        if self.kind is OpKind.GEMM:
            return 2.0 * tokens * self.k * self.n * self.routed
        width = self.head_dim + self.value_dim
        if self.kind is OpKind.ATTENTION and self.causal and self.window is not None and seq_len > self.window:
            pairs = attention_pairs(seq_len, seq_len, causal=True, window=self.window)
            return tokens * 2 * width * self.heads * pairs / seq_len
        if self.kind is OpKind.ATTENTION:
            # scores Q K^T (2*s*d) and values P V (2*s*d_v) per token per head; causal halves them.
            per_token = 2 * seq_len * width * self.heads
            return tokens * per_token / (2 if self.causal else 1)
        return tokens * self.flops_per_token


class Placement(StrEnum):
    """Where a block goes when pipeline stages split the model: before the layers on the first stage
    (embeddings), among the layers split over the stages, or after them on the last stage (LM head)."""

    FIRST = "first"
    LAYERS = "layers"
    LAST = "last"


@dataclass(frozen=True)
class Block:
    """A group of ops repeated `count` times (a transformer layer), or once (embedding, LM head).

    placement: its place in the pipeline split (see `Placement`). per_sequence: it runs on the last
    token of each sequence only (the LM head and sampling of a serving step), not on every token.
    """

    name: str
    ops: tuple[Op, ...]
    count: int = 1
    is_layer: bool = True
    trainable: bool = True
    consumes: tuple[str, ...] | None = None  # blocks whose outputs it reads; None: the previous block
    placement: Placement = Placement.LAYERS
    per_sequence: bool = False

    @property
    def params(self) -> int:
        return sum(op.params for op in self.ops)


@dataclass(frozen=True)
class TableSpec:
    """An embedding table of a recommendation model: rows x dim elements of `elem_bytes` bytes,
    `pooling` lookups per sample (multi-hot size)."""

    rows: int
    dim: int
    pooling: float
    elem_bytes: float
    name: str = ""
    sharding: str | None = None  # the model's choice for this table (tw, rw, cw, twrw, dp, hybrid), if any
    zipf: float = 0.0  # access skew of its rows (Zipf exponent; 0 uniform), for hybrid sharding


@dataclass(frozen=True)
class Workload:
    """A model as blocks in execution order, plus what the family reports about its parameters.

    tables: the embedding tables behind the TABLE ops (recommendation models), for the sharding plan.
    accumulates_gradients: whether a global batch is split into micro-batches by default (LLMs) or
    runs as one micro-batch per rank (recommendation models).
    generates_tokens: inference is autoregressive decoding (LLMs), not one forward pass.
    """

    name: str
    blocks: tuple[Block, ...]
    params_by_component: dict[str, int] = field(default_factory=dict)
    tied_params: int = 0
    tables: tuple[TableSpec, ...] = ()
    accumulates_gradients: bool = True
    # Inference is one forward pass per request batch (recommendation models); a generative model
    # instead needs prefill and a token-by-token decode with its KV cache.
    generates_tokens: bool = True
    # Parameters one token uses (all but the routed experts it is not sent to); None: all of them.
    active_params: int | None = None

    @property
    def total_params(self) -> int:
        return sum(self.params_by_component.values())

    @property
    def active(self) -> int:
        return self.total_params if self.active_params is None else self.active_params

    def forward_flops_per_token(self, seq_len: int) -> float:
        """Model FLOPs per token of one forward pass at sequence length `seq_len` (a block that runs once per
        sequence, `Block.per_sequence`, counts 1/seq_len of its per-row FLOPs)."""
        return sum(
            b.count * op.forward_flops(1, seq_len) / (seq_len if b.per_sequence else 1)
            for b in self.blocks for op in b.ops
        )

    def sequence_flops(self, seq_len: int) -> float:
        """Forward FLOPs of the blocks that run once per sequence (`Block.per_sequence`: a classifier on the
        pooled token, a serving step's LM head and sampling), for one sequence of length `seq_len`."""
        return sum(b.count * op.forward_flops(1, seq_len) for b in self.blocks if b.per_sequence for op in b.ops)
