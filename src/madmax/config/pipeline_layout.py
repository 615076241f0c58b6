"""Pipeline layouts: which virtual pipeline chunk holds the embedding, each transformer layer, the MTP layers
and the loss (with the final norm and the LM head).

A layout is a tuple of chunk strings in virtual-chunk order (chunk v runs on stage v % pp as that stage's
local chunk v // pp), each a string of symbols: E embedding, t transformer layer, m MTP layer, L loss.
Three ways to choose one, as in Megatron-LM:

- `strategy.pp_layout`: Megatron's `--pipeline-model-parallel-layout` string, e.g. "Et|(tt|)*30,mL" (source:
  megatron/core/transformer/pipeline_parallel_layer_layout.py, `PipelineParallelLayerLayout.parse_str_to_list`
  and `validate_layer_layout`; user guide "Custom Pipeline Model Parallel Layout"). Stages are split by '|'
  (empty stages are legal, "E||t|L"); `(...)*N` repeats a group and `x*N` one symbol; commas are cosmetic.
  Megatron does not nest groups, and neither does madmax. The number of chunks is pp*vp; Megatron derives
  vp from it, and so does madmax when vp is not given.
- `strategy.pp_embedding` / `strategy.pp_loss`: Megatron's `account_for_embedding_in_pipeline_split` /
  `account_for_loss_in_pipeline_split` (TransformerConfig, both default False). The embedding (the loss) takes
  the place of one transformer layer: the L + e + l slots split evenly over the pp*vp chunks, and the first
  (last) chunk builds one transformer layer fewer (`get_num_layers_to_build`, transformer_block.py). Megatron
  asserts that the slots divide by pp and each stage's by vp; so does madmax.
- neither: `split_layers`. Where the layers divide evenly over the chunks this is Megatron's default
  split; where they do not (Megatron refuses) madmax still simulates, with the embedding and the loss each in
  place of a layer when L + 2 divides, else the remainder on the middle chunks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from madmax.errors import StrategyError

EMBEDDING, LAYER, MTP, LOSS = "E", "t", "m", "L"
BOUNDARY = "|"
SYMBOLS = {EMBEDDING: "embedding", LAYER: "transformer layer", MTP: "MTP layer", LOSS: "loss and LM head"}
ALLOWED = (", ".join(f"{s} ({what})" for s, what in SYMBOLS.items())
           + ", | (chunk boundary), (...)*N or x*N (repetition), commas (ignored)")
# A bound on the unrolled layout, so a typo such as t*99999999 fails fast instead of filling memory; real
# layouts have a few hundred symbols (the largest models have ~130 layers).
MAX_LAYOUT_SYMBOLS = 100_000
_COUNT = re.compile(r"\*(\d+)")


def expand(text: str) -> str:
    """`text` with its repetitions unrolled and commas dropped: symbols and '|' only.

    Raises ValueError with the reason (the part of the sentence after the value).
    """
    where = [i for i, char in enumerate(text) if char != ","]  # position in `text` of each char of `body`
    return _unrolled(text.replace(",", ""), where, groups=True)


def _unrolled(body: str, where: list[int], *, groups: bool) -> str:
    """`body` (no commas) unrolled; groups: whether (...)*N may appear (not inside a group)."""
    out: list[str] = []
    pos = size = 0
    while pos < len(body):
        char = body[pos]
        if char == "(" and groups:
            close = body.find(")", pos + 1)
            if close < 0:
                raise ValueError(f"the group opened at position {where[pos]} has no ')'; allowed: {ALLOWED}")
            if close == pos + 1:
                raise ValueError(f"the group at position {where[pos]} is empty; allowed: (...)*N around symbols")
            count = _COUNT.match(body, close + 1)
            if count is None:
                raise ValueError(f"the group at position {where[pos]} is not followed by *N; "
                                 "allowed: (...)*N with N a count")
            unit = _unrolled(body[pos + 1:close], where[pos + 1:close], groups=False)
            pos = count.end()
        elif char in SYMBOLS or char == BOUNDARY:
            count = _COUNT.match(body, pos + 1)
            unit, pos = char, (count.end() if count else pos + 1)
        else:
            what = {"(": "a group nested in a group, which Megatron's grammar does not allow,",
                    ")": "')' closing no group", "*": "'*' following no symbol or group"}.get(
                char, f"unknown symbol {char!r}")
            raise ValueError(f"has {what} at position {where[pos]}; allowed: {ALLOWED}")
        digits = count.group(1).lstrip("0") if count else "1"
        # a count longer than the bound's digits exceeds it (and int() refuses thousands of digits)
        times = int(digits or "0") if len(digits) <= len(str(MAX_LAYOUT_SYMBOLS)) else MAX_LAYOUT_SYMBOLS + 1
        size += len(unit) * times
        if size > MAX_LAYOUT_SYMBOLS:
            raise ValueError(f"unrolls to more than {MAX_LAYOUT_SYMBOLS} symbols; allowed: one symbol per layer")
        out.append(unit * times)
    return "".join(out)


def parse_layout(text: str) -> tuple[str, ...]:
    """The chunks of a `pp_layout` string, in virtual-chunk order; StrategyError when it is malformed."""
    try:
        return tuple(expand(text).split(BOUNDARY))
    except ValueError as exc:
        raise StrategyError(f"strategy.pp_layout={text!r}: {exc}") from None


def check_layout(text: str, chunks: Sequence[str], *, pp: int, vp: int, num_layers: int,
                 mtp_layers: int | None = None) -> None:
    """Megatron's rules for a layout (`validate_layer_layout`): pp*vp chunks; the embedding exactly once and
    first, the loss exactly once and last; one 't' per transformer layer; the MTP layers after every
    transformer layer and, when `mtp_layers` is known, one 'm' each."""
    where = f"strategy.pp_layout={text!r}"
    if len(chunks) != pp * vp:
        raise StrategyError(f"{where} has {len(chunks)} chunks (split by '|') but pp*vp={pp}*{vp}={pp * vp}; "
                            f"allowed: {pp * vp} chunks, or omit vp to take it from the layout")
    flat = "".join(chunks)
    for symbol, place, index in ((EMBEDDING, "first", 0), (LOSS, "last", -1)):
        if flat.count(symbol) != 1:
            raise StrategyError(f"{where} holds {flat.count(symbol)} {symbol!r} ({SYMBOLS[symbol]}); allowed: "
                                f"exactly one, as the {place} symbol")
        if flat[index] != symbol:
            raise StrategyError(f"{where} has {flat[index]!r} as its {place} symbol; allowed: {symbol!r} "
                                f"({SYMBOLS[symbol]}) {place}, as Megatron requires")
    if flat.count(LAYER) != num_layers:
        raise StrategyError(f"{where} places {flat.count(LAYER)} transformer layers ('t') but the model has "
                            f"{num_layers}; allowed: {num_layers} 't'")
    if MTP in flat and LAYER in flat[flat.index(MTP):]:
        raise StrategyError(f"{where} places a transformer layer ('t') after an MTP layer ('m'); allowed: every "
                            "'m' after the last 't'")
    if mtp_layers is not None and flat.count(MTP) != mtp_layers:
        raise StrategyError(f"{where} places {flat.count(MTP)} MTP layers ('m') but the model has {mtp_layers}; "
                            f"allowed: {mtp_layers} 'm'")


def accounted_layout(num_layers: int, pp: int, vp: int, *, embedding: bool, loss: bool,
                     mtp_layers: int = 0) -> tuple[str, ...]:
    """Megatron's split when the embedding and/or the loss count as one layer each: (L + e + l) / (pp*vp)
    slots per chunk; the first chunk gives one to the embedding, the last one to the loss (MTP layers run
    beside the loss, on the last chunk, as Megatron places them without a layout)."""
    slots = num_layers + embedding + loss
    chunks = pp * vp
    if slots % chunks:
        named = " + ".join(["layers"] + ["embedding"] * embedding + ["loss"] * loss)
        allowed = [d for d in range(1, slots + 1) if slots % d == 0]
        raise StrategyError(
            f"strategy.pp_embedding={int(embedding)},pp_loss={int(loss)}: the {num_layers} {named} = {slots} "
            f"slots do not split evenly over pp*vp={pp}*{vp}={chunks} chunks, as Megatron requires; allowed: "
            f"pp*vp dividing {slots} ({', '.join(map(str, allowed[:12]))}{', ...' if len(allowed) > 12 else ''}), "
            "other pp_embedding/pp_loss, or a pp_layout")
    per = slots // chunks
    counts = [per] * chunks
    counts[0] -= embedding
    counts[-1] -= loss
    return _layout(counts, mtp_layers)


def default_layout(num_layers: int, pp: int, vp: int, *, mtp_layers: int = 0) -> tuple[str, ...]:
    """madmax's split when neither a layout nor the account flags are given (`split_layers`)."""
    return _layout(split_layers(num_layers, pp * vp), mtp_layers)


def split_layers(num_layers: int, num_chunks: int) -> list[int]:
    """Layers in each of `num_chunks` virtual stages, embedding on the first and LM head on the last:
    madmax's default split, used when a strategy sets neither pp_layout nor pp_embedding/pp_loss.

    Layers that divide evenly split evenly, as Megatron's default does. Megatron refuses the other
    cases; madmax still simulates them: when num_layers + 2 divides evenly (and chunks > 2), the
    embedding and the LM head each take the place of one layer, as Megatron's
    account_for_embedding/loss_in_pipeline_split do (Llama 3 405B: 126 + 2 = 128 over 16 x 4 chunks
    gives 1, 2, ..., 2, 1); otherwise the remainder goes to the middle chunks first.
    """
    assert 1 <= num_chunks <= num_layers
    if num_chunks > 2 and (num_layers + 2) % num_chunks == 0:
        per = (num_layers + 2) // num_chunks
        return [per - 1] + [per] * (num_chunks - 2) + [per - 1]
    base, extra = divmod(num_layers, num_chunks)
    counts = [base] * num_chunks
    # Middle chunks first (ends carry the embedding and the head), then the ends.
    order = [*list(range(1, num_chunks - 1)), 0, num_chunks - 1] if num_chunks > 2 else list(range(num_chunks))
    for i in order[:extra]:
        counts[i] += 1
    return counts


def _layout(counts: list[int], mtp_layers: int) -> tuple[str, ...]:
    chunks = [LAYER * c for c in counts]
    chunks[0] = EMBEDDING + chunks[0]
    chunks[-1] += MTP * mtp_layers + LOSS
    return tuple(chunks)


def pipeline_layout(pp: int, vp: int, num_layers: int, *, text: str | None = None, embedding: bool = False,
                    loss: bool = False, mtp_layers: int | None = None) -> tuple[str, ...]:
    """The layout a strategy asks for: its `pp_layout` (checked), else the accounted split when pp_embedding
    or pp_loss is set, else the default split. mtp_layers None: not known yet (not checked; none placed)."""
    if text is not None:
        if embedding or loss:
            raise StrategyError(f"strategy.pp_layout={text!r} places the embedding and the loss itself; allowed "
                                "with pp_layout: pp_embedding=0 and pp_loss=0 (as Megatron)")
        chunks = parse_layout(text)
        check_layout(text, chunks, pp=pp, vp=vp, num_layers=num_layers, mtp_layers=mtp_layers)
        return chunks
    if embedding or loss:
        return accounted_layout(num_layers, pp, vp, embedding=embedding, loss=loss, mtp_layers=mtp_layers or 0)
    return default_layout(num_layers, pp, vp, mtp_layers=mtp_layers or 0)


def layout_vp(text: str, pp: int) -> int:
    """The vp a layout implies (its chunks / pp), as Megatron derives it; StrategyError when pp does not
    divide them."""
    chunks = parse_layout(text)
    if len(chunks) % pp:
        raise StrategyError(f"strategy.pp_layout={text!r} has {len(chunks)} chunks (split by '|'), not a multiple "
                            f"of pp={pp}; allowed: pp*vp chunks")
    return len(chunks) // pp
