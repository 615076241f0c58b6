"""Parallelization strategy: the grammar `tp=8,pp=4,dp=32,cp=1,ep=1,vp=1,mbs=1,zero=1,recompute=selective,sp=1`.

Cross-axis rules (the degrees multiply to the GPU count, TP divides the heads, PP splits the layers,
the global batch splits into micro-batches) are checked here, once, by `resolve`; the transforms in
`madmax.parallel` trust a resolved strategy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, PositiveInt, ValidationError, field_validator

from madmax.config import pipeline_layout as layout
from madmax.config.base import Schema
from madmax.config.checks import MAX_SCHEDULE_STEPS, divisors, shown
from madmax.errors import StrategyError


class Axis(StrEnum):
    """Parallel axes. 'axis' is a parallel axis, 'dim' a tensor dimension."""

    TP = "tp"
    CP = "cp"
    EP = "ep"
    DP = "dp"
    PP = "pp"


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


# recompute=auto (or no recompute): the cheapest mode that fits is chosen (madmax.parallel.recompute).
RECOMPUTE_AUTO = "auto"
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
EMB_SHARDINGS = ("tw", "rw", "cw", "twrw", "dp", "hybrid")
EMB_BALANCES = ("size", "lookup", "count")  # strategy.emb_balance, the default first
DISPATCHERS = ("alltoall", "deepep")  # strategy.dispatcher, the default first


class Strategy(Schema):
    """Degrees of each parallel axis and the memory/overlap options of one training or serving run."""

    tp: PositiveInt = Field(1, description="Tensor (Megatron) parallel degree.")
    pp: PositiveInt = Field(1, description="Pipeline parallel degree (stages).")
    dp: PositiveInt | None = Field(None, description="Data parallel degree; default GPUs / (tp*pp*cp).")
    cp: PositiveInt = Field(1, description="Context parallel degree (sequence split, ring K/V exchange).")
    ep: PositiveInt = Field(1, description="Expert parallel degree (MoE models only): ranks that split the "
                            "routed experts, folded over the tp x cp x dp ranks of a stage; unset: the largest that "
                            "divides the experts and those ranks (`default_expert_parallel`).")
    vp: PositiveInt = Field(1, description="Virtual pipeline chunks per stage (interleaved 1F1B when > 1).")
    mbs: PositiveInt = Field(1, description="Micro-batch size in sequences.")
    zero: int = Field(1, ge=0, le=3, description="ZeRO stage: 0 DDP, 1 optimizer, 2 +gradients, 3 +weights (FSDP); "
                      "unset: 1, or the lowest stage that fits (the result says why).")
    shard: PositiveInt | None = Field(
        None, description="ZeRO/FSDP sharding group (hybrid sharding: shard within, replicate across); default dp."
    )
    recompute: Recompute | None = Field(
        None, description="Activation recompute: none, selective, full; unset or auto: the cheapest that fits "
        "(madmax.parallel.recompute chooses it and the result says why).")
    recompute_layers: PositiveInt | None = Field(
        None, description="With recompute=full: recompute only the first N layers of each pipeline chunk, the "
        "rest keep all their activations (Megatron's recompute_method=block, recompute_num_layers=N); "
        "default all layers.")
    sp: bool | None = Field(None, description="Megatron sequence parallelism; default on when tp > 1.")
    flash: bool = Field(True, description="Fused (flash) attention: no s^2 activations, one kernel.")
    dp_overlap: bool = Field(True, description="Overlap the gradient reduction with the backward pass.")
    tp_overlap: bool = Field(False, description="Pipeline the TP all-gathers and reduce-scatters with the GEMMs "
                             "beside them in chunks (Transformer Engine comm-GEMM overlap, userbuffers; "
                             "Megatron-Core's tp_comm_overlap, default false); needs tp > 1 and sp.")
    overlap_cost: bool = Field(False, description="Charge the compute that runs beside a collective for the SMs "
                               "and HBM bandwidth the collective holds (catalog efficiency.yaml `overlap`); "
                               "default off: overlap is free, as the search's estimates assume.")
    fp8_params: bool = Field(False, description="dtype=fp8: keep the low-precision GEMMs' weights in fp8 only, "
                             "no bf16 copy (Transformer Engine fp8 primary weights; Megatron's --fp8-param-gather, "
                             "default false, on in NeMo's and Megatron-Bridge's fp8 recipes): the optimizer writes "
                             "fp8 weights and the distributed optimizer gathers them in fp8.")
    etp: PositiveInt = Field(1, description="Expert tensor parallel degree: ranks that split each routed "
                             "expert's width (needs ep > 1); expert data parallelism is tp*cp*dp / (ep*etp). "
                             "Default 1, as Megatron-Bridge's MoE recipes set it (Megatron-Core's own default "
                             "is tp).")
    ep_overlap: bool = Field(
        False, description="Overlap each micro-batch's expert all-to-all with another micro-batch's compute "
        "(two-micro-batch overlap of Megatron-Core / DualPipe); false: the layer waits for it.")
    dispatch_fp8: bool = Field(False, description="Send dispatched tokens in fp8 (DeepEP); the combine stays "
                                                  "in 16 bits.")
    expert_order: Literal["etp-ep-edp", "etp-edp-ep", "ep-etp-edp"] = Field(
        "etp-ep-edp", description="Placement of the expert axes over a stage's ranks, innermost first "
        "(Megatron-Core's etp-ep-edp keeps an EP group inside a scale-up domain when etp*ep fits in it; "
        "etp-edp-ep puts the expert copies there and spreads the EP group across domains; ep-etp-edp puts EP "
        "ranks next to each other and strides the expert slices).")
    dispatcher: Literal["alltoall", "deepep"] = Field(
        "alltoall", description="Token dispatcher of expert parallelism: alltoall (one copy per chosen expert "
        "over the network) or deepep (one copy per destination node over the scale-out fabric, forwarded "
        "inside the node over the scale-up fabric; DeepSeek-V3 Sec. 3.2.2).")
    order: str = Field(DEFAULT_ORDER, description="Placement of axes on the network, innermost first.")
    emb: str = Field("tw", description="Embedding-table sharding (recommendation models): tw, rw, cw, twrw, dp, "
                                          "hybrid (frequent rows replicated, the rest table-wise).")
    emb_balance: Literal["size", "lookup", "count"] = Field(
        "size", description="Balance table placement by bytes stored (size), by lookup cost (lookup), or deal the "
                            "tables sorted by size in snake order, as many per rank (count).")
    emb_offload: bool = Field(False, description="Keep embedding rows that do not fit HBM in host memory "
                                                 "(each lookup of them crosses the host link).")
    emb_hot: float | None = Field(
        None, ge=0, le=1, allow_inf_nan=False,
        description="emb=hybrid: a row is replicated (hot, data-parallel) when at least this fraction of samples "
                    "look it up; default the break-even of its gradient all-reduce against its all-to-all "
                    "(madmax.parallel.embedding).")
    emb_group: PositiveInt | None = Field(
        None, description="Ranks sharing one copy of the tables (2-D sharding: replicated across groups); "
                          "default all ranks.")
    emb_cold: Literal["tw", "twrw"] = Field(
        "tw", description="emb=hybrid: where the model-parallel (cold) parts live: tw, each on one rank, exchanged "
                          "by one all-to-all over the group; twrw, each on one node with its rows split over the "
                          "node's ranks, reduced inside the node and exchanged between nodes on each rail (HugeCTR's "
                          "hierarchical embedding, TorchRec's table-row-wise).")
    emb_dp_bytes: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="emb=hybrid: replicate (data-parallel) the whole tables whose elements take fewer bytes than "
                    "this and keep every row of the others model-parallel (0: none replicated), in place of the "
                    "per-row hot threshold (HugeCTR's DP_SHARDING_THRESHOLD); bytes.")
    emb_shard_cost: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="emb=hybrid with emb_balance=lookup: the planner counts each model-parallel shard as this many "
                    "more lookups per sample than it serves, so it cuts hot tables into fewer shards (HugeCTR's "
                    "planner table cost, MEM_COMM_BW_RATIO / mem_comm_work_ratio); default 0.")
    pp_embedding: bool = Field(False, description="Count the embedding as one layer of the pipeline split "
                               "(Megatron's account_for_embedding_in_pipeline_split, default false): the first "
                               "chunk holds one transformer layer fewer (madmax.config.pipeline_layout).")
    pp_loss: bool = Field(False, description="Count the loss (final norm, LM head, loss) as one layer of the "
                          "pipeline split (Megatron's account_for_loss_in_pipeline_split, default false): the last "
                          "chunk holds one transformer layer fewer.")
    pp_layout: str | None = Field(
        None, description="Explicit pipeline layout in Megatron's pipeline_model_parallel_layout grammar, e.g. "
        "\"Et|(tt|)*30,mL\": E embedding, t transformer layer, m MTP layer, L loss, | chunk boundary, (...)*N or "
        "x*N repetition, commas ignored; pp*vp chunks in virtual order (vp defaults to chunks / pp). Default: "
        "layers spread evenly (madmax.config.pipeline_layout).")
    # Disaggregated serving: separate prefill and decode workers, each worker tp x pp GPUs.
    prefill_workers: PositiveInt | None = Field(None, description="Prefill workers (disaggregated serving).")
    prefill_tp: PositiveInt = Field(1, description="Tensor-parallel degree of a prefill worker.")
    prefill_pp: PositiveInt = Field(1, description="Pipeline-parallel degree of a prefill worker.")
    decode_workers: PositiveInt | None = Field(None, description="Decode workers (disaggregated serving).")
    decode_tp: PositiveInt = Field(1, description="Tensor-parallel degree of a decode worker.")
    decode_pp: PositiveInt = Field(1, description="Pipeline-parallel degree of a decode worker.")
    prefill_ep: PositiveInt = Field(1, description="Expert-parallel degree of a prefill worker (MoE models; "
                                    "beyond prefill_tp: attention data parallelism).")
    decode_ep: PositiveInt = Field(1, description="Expert-parallel degree of a decode worker (MoE models; "
                                   "beyond decode_tp: attention data parallelism).")

    @field_validator("recompute", mode="before")
    @classmethod
    def _recompute(cls, value: object) -> object:
        """`auto` asks for the choice explicitly, like leaving recompute unset."""
        if not isinstance(value, str):
            return value
        allowed = [r.value for r in Recompute] + [RECOMPUTE_AUTO]
        if value.strip().lower() not in allowed:
            raise ValueError(f"is not a recompute mode; allowed: {', '.join(allowed)}")
        return None if value.strip().lower() == RECOMPUTE_AUTO else value.strip().lower()

    @field_validator("pp_layout")
    @classmethod
    def _pp_layout(cls, value: str | None) -> str | None:
        """The grammar only here; the counts need the model (`resolve_strategy`, `plan._stages`)."""
        if value is not None:
            layout.expand(value)
        return value

    @field_validator("emb")
    @classmethod
    def _emb(cls, value: str) -> str:
        if value not in EMB_SHARDINGS:
            raise ValueError(f"is not an embedding sharding; allowed: {', '.join(EMB_SHARDINGS)}")
        return value

    @field_validator("order")
    @classmethod
    def _order(cls, value: str) -> str:
        axes = value.split("-")
        if sorted(axes) != sorted(a.value for a in Axis):
            missing = [a.value for a in Axis if a.value not in axes]
            unknown = sorted({a for a in axes if a not in {x.value for x in Axis}})
            repeated = sorted({a for a in axes if axes.count(a) > 1})
            problem = "; ".join(f"{what} {', '.join(names)}" for what, names in
                                (("missing", missing), ("unknown", unknown), ("repeated", repeated)) if names)
            raise ValueError(f"must name each of tp, cp, ep, dp, pp once ({problem}); e.g. {DEFAULT_ORDER}")
        return value

    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else self.sp and self.tp > 1

    @property
    def shard_degree(self) -> int:
        """Ranks that share one copy of the sharded state (ZeRO >= 1), 1 for plain DDP."""
        if self.zero == 0:
            return 1
        return self.shard or self.dp or 1

    def degree(self, axis: Axis) -> int:
        return {Axis.TP: self.tp, Axis.PP: self.pp, Axis.DP: self.dp or 1, Axis.CP: self.cp,
                Axis.EP: self.ep}[axis]

    def describe(self, forward_only: bool = False) -> str:
        """The strategy in the grammar of `parse_strategy`, every key spelled out; `forward_only` (an inference
        pass) leaves out what only training has: ZeRO, its sharding and recomputation."""
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}", f"cp={self.cp}", f"ep={self.ep}",
                 f"vp={self.vp}", f"mbs={self.mbs}"] + ([] if forward_only else [f"zero={self.zero}"])
        if self.shard and self.shard != self.dp and not forward_only:
            parts.append(f"shard={self.shard}")
        if self.etp > 1:
            parts.append(f"etp={self.etp}")
        if self.ep_overlap:
            parts.append("ep_overlap=1")
        parts += [f"{key}=1" for key in ("tp_overlap", "overlap_cost", "fp8_params") if getattr(self, key)]
        if self.dispatch_fp8:
            parts.append("dispatch_fp8=1")
        if self.dispatcher != "alltoall":
            parts.append(f"dispatcher={self.dispatcher}")
        if self.expert_order != "etp-ep-edp":
            parts.append(f"expert_order={self.expert_order}")
        parts += [f"{key}=1" for key in ("pp_embedding", "pp_loss") if getattr(self, key)]
        if self.pp_layout is not None:
            parts.append(f"pp_layout={self.pp_layout.replace(',', '')}")  # its commas are cosmetic
        if not forward_only:
            parts.append(f"recompute={self.recompute or RECOMPUTE_AUTO}")
            if self.recompute_layers is not None:
                parts.append(f"recompute_layers={self.recompute_layers}")
        parts.append(f"sp={int(self.sequence_parallel)}")
        return ",".join(parts)


STRATEGY_KEYS = tuple(Strategy.model_fields)
_ALIASES = {"fsdp": "zero", "micro_batch": "mbs", "vpp": "vp", "dp_shard": "shard"}


def parse_strategy(text: str | dict | Strategy | None) -> Strategy:
    """A Strategy from the `key=value,...` grammar, a mapping, or an existing Strategy.

    `fsdp=1` is ZeRO-3; boolean keys take 1/0, true/false, on/off.
    """
    if text is None:
        return Strategy()
    if isinstance(text, Strategy):
        return text
    if isinstance(text, str):
        items: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep and items and list(items)[-1] == "pp_layout":
                items["pp_layout"] += "," + part  # commas inside a layout are cosmetic (Megatron's grammar)
                continue
            key = key.strip()
            if key in items:
                raise StrategyError(f"strategy key {shown(key)} is given twice in {shown(text)}")
            if not sep or not value.strip():
                raise StrategyError(f"strategy item {shown(part)} is not key=value; example: tp=8,pp=4,dp=32")
            items[key] = value.strip()
        raw: dict = items
    elif isinstance(text, dict):
        raw = dict(text)
    else:
        raise StrategyError(f"strategy={shown(text)} is of type {type(text).__name__}; allowed: a string such as "
                            "'tp=8,pp=4', a mapping of keys, or a Strategy")
    data: dict = {}
    for key, value in raw.items():
        name = _ALIASES.get(key, key)
        if name not in STRATEGY_KEYS:
            raise StrategyError(f"strategy key {shown(key)} is unknown; allowed: {', '.join(STRATEGY_KEYS)}")
        if key == "fsdp":
            value = 3 if str(value).lower() in {"1", "true", "on", "yes"} else 0
        data[name] = value
    try:
        return Strategy.model_validate(data)
    except ValidationError as exc:
        raise StrategyError(_first_error("strategy", exc)) from None


def _check_experts(s: Strategy, ranks: int) -> None:
    """Expert parallelism folds over the tp*cp*dp ranks of a stage: ep*etp must divide them, and with
    tensor parallelism the tokens must be split over tp (sequence parallelism) before their dispatch."""
    if ranks % (s.ep * s.etp):
        raise StrategyError(f"strategy.ep*etp={s.ep}*{s.etp}={s.ep * s.etp} does not divide the tp*cp*dp={ranks} "
                            f"ranks of a pipeline stage that the experts fold over; allowed ep*etp: "
                            f"{_allowed(_divisors(ranks))}")
    if s.tp > 1 and not s.sequence_parallel:
        raise StrategyError(f"strategy.sp=0 with tp={s.tp} on a mixture-of-experts model: the MoE layers need "
                            "sequence parallelism to split the tokens over tp before dispatching them; allowed: sp=1")


def default_expert_parallel(s: Strategy, num_gpus: int, num_experts: int) -> int:
    """The expert-parallel degree of a strategy that leaves `ep` unset: the largest that divides the routed
    experts and, times etp, the tp*cp*dp ranks of a pipeline stage, so that each GPU holds as few experts as the
    layout allows (Megatron-Core's own default, ep=1, keeps every expert on every GPU: DeepSeek-V3's 654 B expert
    parameters on each of 256 GPUs). 1 when the layout does not divide the GPUs (`resolve_strategy` says why).
    """
    if num_gpus % (s.tp * s.pp * s.cp):
        return 1
    ranks = num_gpus // s.pp
    return max((d for d in _divisors(num_experts) if ranks % (d * s.etp) == 0), default=1)


def _first_error(prefix: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"])
    where = f"{prefix}.{field}" if field else prefix
    value = err.get("input")
    given = f"={shown(value)}" if field and not isinstance(value, dict) else ""
    if err["type"] in {"bool_parsing", "bool_type"}:
        return f"{where}{given} is not a boolean; allowed: 1, 0, true, false, on, off"
    return f"{where}{given}: {err['msg'].removeprefix('Value error, ')}"


_divisors = divisors  # factored, so that listing the divisors of a size of 2**40 answers at once


# Strategy keys that only some models or tasks use: given (with a value other than the default) where they do not
# apply, they are refused rather than silently dropped.
EXPERT_KEYS = ("etp", "ep_overlap", "dispatch_fp8", "expert_order", "dispatcher")
EMBEDDING_KEYS = ("emb", "emb_balance", "emb_offload", "emb_hot", "emb_group", "emb_cold", "emb_dp_bytes",
                  "emb_shard_cost")
SERVING_PREFIXES = ("prefill_", "decode_")


def check_training_keys(s: Strategy, model_name: str, has_experts: bool, has_tables: bool) -> None:
    """StrategyError for a key given a value that a training run of this model would not use."""
    for key in sorted(s.model_fields_set):
        if getattr(s, key) == type(s).model_fields[key].get_default():
            continue
        if key in EXPERT_KEYS and not has_experts:
            raise StrategyError(f"strategy.{key} applies to mixture-of-experts models; {model_name} has no "
                                "experts; allowed: omit it")
        if key in EMBEDDING_KEYS and not has_tables:
            raise StrategyError(f"strategy.{key} shards a recommendation model's embedding tables; {model_name} has "
                                "none; allowed: omit it")
        if key.startswith(SERVING_PREFIXES):
            raise StrategyError(f"strategy.{key} sizes a disaggregated serving worker (task inference, mode "
                                "disaggregated), not a training run; allowed: omit it")


def _embedding_loss_hint(chunks: int, layers: int) -> str:
    """The way out when the embedding and the loss, counted as layers, fill the chunks (Megatron-Bridge's
    Llama-3.1-405B layouts: 126 layers + 2 in pp*vp = 128 chunks)."""
    if chunks > layers + 2:
        return ""
    both = "pp_embedding=1,pp_loss=1" if chunks == layers + 2 else "pp_embedding=1 or pp_loss=1"
    return f", or {both} (Megatron's account_for_embedding/loss_in_pipeline_split)"


def _allowed(values: list[int], limit: int = 12) -> str:
    shown = ", ".join(map(str, values[:limit]))
    return shown + (", ..." if len(values) > limit else "")


def resolve_strategy(
    strategy: Strategy,
    *,
    num_gpus: int,
    model_name: str,
    constraints: dict[str, list[tuple[str, int]]],
    num_pipeline_units: int,
    global_batch: int | None,
    seq_len: int,
    has_experts: bool = False,
    limits: dict[Axis, tuple[int, str]] | None = None,
    accumulates_gradients: bool = True,
) -> tuple[Strategy, int]:
    """Check every cross-axis rule; return the strategy with `dp` filled in and the global batch.

    constraints: per strategy key, the model sizes its degree must divide (e.g. tp: num_heads,
    num_kv_heads; ep: moe.num_experts; etp: moe.expert_ffn_hidden_size).
    num_pipeline_units: layers that pipeline stages can split (pp*vp must not exceed it).
    limits: per axis, the largest degree the model's family is modelled for, and why.
    A missing global batch becomes dp*mbs*pp sequences (one micro-batch per stage in flight); a model
    that does not accumulate gradients gets mbs = global_batch / dp unless mbs is given.
    """
    s = strategy
    inner = s.tp * s.pp * s.cp
    if num_gpus % inner:
        raise StrategyError(
            f"tp*pp*cp={s.tp}*{s.pp}*{s.cp}={inner} does not divide num_gpus={num_gpus}; "
            f"allowed products: {_allowed(_divisors(num_gpus))}"
        )
    dp = num_gpus // inner
    if s.dp is not None and s.dp != dp:
        raise StrategyError(
            f"strategy.dp={s.dp} but num_gpus={num_gpus} / (tp*pp*cp={inner}) = {dp}; omit dp or set dp={dp}"
        )
    if s.tp_overlap and not s.sequence_parallel:
        raise StrategyError(f"strategy.tp_overlap needs tp > 1 with sequence parallelism (it overlaps the TP "
                            f"all-gathers and reduce-scatters); got tp={s.tp}, sp={int(s.sequence_parallel)}; "
                            "allowed with these: tp_overlap=0")
    if s.etp > 1 and s.ep == 1:
        raise StrategyError(f"strategy.etp={s.etp} needs expert parallelism (ep > 1): expert tensor parallelism "
                            "splits the experts that ep places; allowed with ep=1: etp=1")
    for axis, sizes in constraints.items():
        degree = getattr(s, str(axis))
        for field, size in sizes:
            if size % degree:
                common = sorted(set.intersection(*(set(_divisors(v)) for _, v in sizes)))
                raise StrategyError(
                    f"strategy.{axis}={degree} does not divide {field}={size} of {model_name}; "
                    f"allowed: {_allowed(common)}"
                )
    if s.ep > 1 and not has_experts:
        raise StrategyError(f"strategy.ep={s.ep} needs a mixture-of-experts model; {model_name} has none; allowed: 1")
    if has_experts:
        _check_experts(s, inner // s.pp * dp)
    for axis, (limit, why) in (limits or {}).items():
        if s.degree(Axis(axis)) > limit:
            raise StrategyError(f"strategy.{axis}={s.degree(Axis(axis))} is not modelled for {model_name}: {why}; "
                                f"allowed: {', '.join(map(str, range(1, limit + 1)))}")
    if s.pp_layout is not None and "vp" not in s.model_fields_set:
        s = s.model_copy(update={"vp": layout.layout_vp(s.pp_layout, s.pp)})  # vp from the layout, as Megatron
    if (s.pp_layout is None and "pp_embedding" not in s.model_fields_set and "pp_loss" not in s.model_fields_set
            and s.pp * s.vp == num_pipeline_units + 2):
        # The only split Megatron runs with pp*vp = layers + 2 chunks: the embedding and the loss each take a layer's
        # slot (account_for_embedding/loss_in_pipeline_split; Megatron-Bridge's Llama-3.1-405B pp=16, vp=8 layouts).
        s = s.model_copy(update={"pp_embedding": True, "pp_loss": True})
    if s.pp_layout is not None or s.pp_embedding or s.pp_loss:
        # the MTP layers are checked against the workload when the plan places them (`plan._stages`)
        layout.pipeline_layout(s.pp, s.vp, num_pipeline_units, text=s.pp_layout, embedding=s.pp_embedding,
                               loss=s.pp_loss)
    elif s.pp * s.vp > num_pipeline_units:
        raise StrategyError(
            f"strategy.pp*vp={s.pp}*{s.vp} exceeds the {num_pipeline_units} layers of {model_name}; "
            f"allowed: pp*vp <= {num_pipeline_units}" + _embedding_loss_hint(s.pp * s.vp, num_pipeline_units)
        )
    if s.vp > 1 and s.pp == 1:
        raise StrategyError(f"strategy.vp={s.vp} needs pipeline parallelism (pp > 1); allowed with pp=1: 1")
    if s.recompute_layers is not None and s.recompute is not Recompute.FULL:
        raise StrategyError(f"strategy.recompute_layers={s.recompute_layers} needs recompute=full (it recomputes the "
                            f"first N layers of each chunk in full), not recompute={s.recompute or RECOMPUTE_AUTO}; "
                            "allowed: recompute=full with recompute_layers, or no recompute_layers")
    if seq_len % s.cp:
        raise StrategyError(f"strategy.cp={s.cp} does not divide seq_len={seq_len}; "
                            f"allowed: {_allowed([d for d in _divisors(seq_len) if num_gpus % d == 0])}")
    if s.shard is not None and (s.zero == 0 or dp % s.shard):
        allowed = _allowed(_divisors(dp)) if s.zero else "none (shard needs zero >= 1)"
        raise StrategyError(f"strategy.shard={s.shard} must divide dp={dp} with zero >= 1; allowed: {allowed}")
    if global_batch is None:
        global_batch = dp * s.mbs * s.pp
    if not accumulates_gradients and "mbs" not in s.model_fields_set and global_batch % dp == 0:
        # One micro-batch per rank and iteration (recommendation models): mbs = global_batch / dp.
        s = s.model_copy(update={"mbs": global_batch // dp})
    if global_batch % (dp * s.mbs):
        raise StrategyError(
            f"global_batch={global_batch} is not a multiple of dp*mbs={dp}*{s.mbs}={dp * s.mbs}; "
            f"allowed mbs: {_allowed([d for d in _divisors(global_batch // dp) if global_batch % dp == 0])}"
            if global_batch % dp == 0
            else f"global_batch={global_batch} is not a multiple of dp={dp}; allowed: a multiple of {dp}"
        )
    microbatches = global_batch // (dp * s.mbs)
    if microbatches * s.pp * s.vp > MAX_SCHEDULE_STEPS:
        most = MAX_SCHEDULE_STEPS // (s.pp * s.vp) * dp * s.mbs
        raise StrategyError(
            f"global_batch={global_batch} is {microbatches:,} micro-batches per replica on pp*vp={s.pp * s.vp} "
            f"pipeline chunks, {microbatches * s.pp * s.vp:,} (micro-batch, chunk) steps; the simulator schedules "
            f"each one and takes at most {MAX_SCHEDULE_STEPS:,}; allowed: global_batch up to {most:,} with "
            f"dp*mbs={dp}*{s.mbs}, or a larger mbs or dp")
    if s.ep_overlap and microbatches < 2:
        raise StrategyError(f"strategy.ep_overlap=1 hides one micro-batch's all-to-all behind another's compute, "
                            f"but each replica runs {microbatches} micro-batch; allowed: ep_overlap=0, or a "
                            f"global_batch of at least 2*dp*mbs={2 * dp * s.mbs}")
    if s.vp > 1 and microbatches % s.pp:
        raise StrategyError(
            f"interleaved pipeline (vp={s.vp}) needs micro-batches per replica ({microbatches}) "
            f"to be a multiple of pp={s.pp}; allowed: global_batch a multiple of dp*mbs*pp={dp * s.mbs * s.pp}"
        )
    return s.model_copy(update={"dp": dp}), global_batch
