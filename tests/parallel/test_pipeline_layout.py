"""Pipeline layouts (`madmax.config.pipeline_layout`) against Megatron-LM's rules, worked by hand."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax.cli import app
from madmax.config.base import DType
from madmax.config.model import DecoderModel
from madmax.config.pipeline_layout import accounted_layout, check_layout, default_layout, parse_layout, pipeline_layout
from madmax.config.strategy import Strategy, parse_strategy, resolve_strategy
from madmax.config.task import Task
from madmax.errors import StrategyError
from madmax.parallel.memory import stage_memory
from madmax.parallel.plan import build_plan
from madmax.workload import build_workload


def stage_chunks(chunks: tuple[str, ...], pp: int, stage: int) -> list[str]:
    """The local chunks of `stage`: virtual chunk v runs on stage v % pp."""
    return list(chunks[stage::pp])


# --- account_for_embedding / account_for_loss (Megatron get_num_layers_to_build) ------------------

def test_405b_pp16_vp8_gives_the_embedding_and_the_loss_chunks_of_their_own():
    # 126 layers + E + L = 128 slots over 16*8 = 128 chunks: one slot each; the first chunk (stage 0,
    # local chunk 0) gives its slot to the embedding, the last (stage 15, local chunk 7) to the loss.
    chunks = accounted_layout(126, 16, 8, embedding=True, loss=True)
    assert len(chunks) == 128
    assert chunks[0] == "E" and chunks[-1] == "L"
    assert set(chunks[1:-1]) == {"t"}
    assert stage_chunks(chunks, 16, 0) == ["E"] + ["t"] * 7
    assert stage_chunks(chunks, 16, 15) == ["t"] * 7 + ["L"]
    assert "".join(chunks).count("t") == 126


def test_126_layers_pp16_vp4_with_both_flags_matches_the_default_split():
    # 128 / 64 = 2 slots per chunk: "Et", then 62 x "tt", then "tL" -- what madmax's default picks too.
    chunks = accounted_layout(126, 16, 4, embedding=True, loss=True)
    assert chunks[0] == "Et" and chunks[-1] == "tL" and set(chunks[1:-1]) == {"tt"}
    assert default_layout(126, 16, 4) == chunks


def test_one_flag_only_takes_one_slot():
    # embedding only: 31 + 1 = 32 slots over 4*2 = 8 chunks of 4: the first builds 3 layers.
    assert [c.count("t") for c in accounted_layout(31, 4, 2, embedding=True, loss=False)] == [3] + [4] * 7
    # loss only: 7 + 1 = 8 slots over 4 chunks of 2: the last builds 1 layer.
    assert accounted_layout(7, 4, 1, embedding=False, loss=True) == ("Ett", "tt", "tt", "tL")


def test_mtp_layers_run_beside_the_loss_without_a_layout():
    assert accounted_layout(6, 2, 1, embedding=True, loss=True, mtp_layers=1) == ("Ettt", "tttmL")
    assert default_layout(6, 2, 1, mtp_layers=2) == ("Ettt", "tttmmL")


def test_uneven_accounted_split_is_refused_in_one_sentence():
    with pytest.raises(StrategyError) as info:
        accounted_layout(126, 16, 4, embedding=True, loss=False)
    message = str(info.value)
    assert message.startswith("strategy.pp_embedding=1,pp_loss=0: the 126 layers + embedding = 127 slots")
    assert "pp*vp=16*4=64" in message and "allowed: pp*vp dividing 127 (1, 127)" in message


# --- the layout grammar (Megatron PipelineParallelLayerLayout.parse_str_to_list) -------------------

def test_megatron_deepseek_v3_example():
    # Megatron's user guide: DeepSeek-V3 (61 layers + 1 MTP) with pp=16, vp=2: "Et*3|(tt|)*29,m|L".
    chunks = parse_layout("Et*3|(tt|)*29,m|L")
    assert len(chunks) == 32
    check_layout("Et*3|(tt|)*29,m|L", chunks, pp=16, vp=2, num_layers=61, mtp_layers=1)
    assert stage_chunks(chunks, 16, 0) == ["Ettt", "tt"]
    assert stage_chunks(chunks, 16, 7) == ["tt", "tt"]
    assert stage_chunks(chunks, 16, 14) == ["tt", "m"]
    assert stage_chunks(chunks, 16, 15) == ["tt", "L"]


@pytest.mark.parametrize(("text", "chunks"), [
    ("E|t|L", ("E", "t", "L")),
    ("E||t|L", ("E", "", "t", "L")),  # Megatron: empty stages are legal
    ("Et*3|L", ("Ettt", "L")),
    ("(tt|)*2", ("tt", "tt", "")),
    ("E,(t|)*2,t,L", ("Et", "t", "tL")),  # commas are cosmetic
    ("(t|t)*2", ("t", "tt", "t")),
    ("(t*2|)*2L", ("tt", "tt", "L")),  # x*N inside a group
    ("t*0E|L", ("E", "L")),
    ("|*2", ("", "", "")),
])
def test_layout_strings_unroll(text: str, chunks: tuple[str, ...]) -> None:
    assert parse_layout(text) == chunks


@pytest.mark.parametrize(("text", "words"), [
    ("Ex|L", ["'Ex|L'", "unknown symbol 'x' at position 1", "allowed: E (embedding)"]),
    ("E|(t|)|L", ["not followed by *N"]),
    ("((t|)*2)*2", ["nested", "position 1"]),
    ("(t|", ["has no ')'"]),
    ("t)", ["')' closing no group at position 1"]),
    ("*3", ["'*' following no symbol"]),
    ("()*3", ["empty"]),
    ("t*99999999999999999999", ["more than 100000 symbols"]),
])
def test_malformed_layouts_name_the_value(text: str, words: list[str]) -> None:
    with pytest.raises(StrategyError) as info:
        parse_layout(text)
    message = str(info.value)
    assert message.startswith(f"strategy.pp_layout={text!r}: ")
    assert "\n" not in message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(("text", "pp", "vp", "words"), [
    ("E|(t|)*5,L", 2, 2, ["has 7 chunks", "pp*vp=2*2=4", "allowed: 4 chunks"]),
    ("E|ttt|tt|L", 2, 2, ["places 5 transformer layers", "has 6", "allowed: 6 't'"]),
    ("tE|ttt|tt|L", 2, 2, ["'t' as its first symbol", "'E' (embedding) first"]),
    ("E|ttt|ttt|Lt", 2, 2, ["'t' as its last symbol", "'L' (loss and LM head) last"]),
    ("E|tttE|ttt|L", 2, 2, ["holds 2 'E'", "exactly one"]),
    ("E|ttt|ttt|", 2, 2, ["holds 0 'L'"]),
    ("E|ttm|ttt|tL", 2, 2, ["after an MTP layer"]),
])
def test_impossible_layouts_are_refused(text: str, pp: int, vp: int, words: list[str]) -> None:
    with pytest.raises(StrategyError) as info:
        check_layout(text, parse_layout(text), pp=pp, vp=vp, num_layers=6)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_mtp_count_is_checked_when_known():
    text = "E|ttt|ttt|L"
    check_layout(text, parse_layout(text), pp=2, vp=2, num_layers=6)  # MTP not known yet: not checked
    with pytest.raises(StrategyError, match="places 0 MTP layers"):
        check_layout(text, parse_layout(text), pp=2, vp=2, num_layers=6, mtp_layers=1)


def test_layout_excludes_the_account_flags():
    with pytest.raises(StrategyError, match="allowed with pp_layout: pp_embedding=0 and pp_loss=0"):
        pipeline_layout(2, 1, 6, text="Ettt|tttL", embedding=True)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(alphabet="EtmL|()*,0123456789x ", max_size=40), st.text(max_size=40)))
def test_any_string_is_a_layout_or_a_strategy_error(text: str) -> None:
    try:
        parse_strategy({"pp_layout": text})  # the strategy key checks the grammar alike
    except StrategyError as exc:
        assert str(exc).startswith("strategy.pp_layout=") and "\n" not in str(exc)
    try:
        chunks = parse_layout(text)
    except StrategyError as exc:
        assert str(exc).startswith("strategy.pp_layout=") and "\n" not in str(exc)
        return
    assert all(set(chunk) <= set("EtmL") for chunk in chunks)
    with contextlib.suppress(StrategyError):  # a well-formed string may still break Megatron's rules
        check_layout(text, chunks, pp=1, vp=len(chunks), num_layers=3, mtp_layers=1)


# --- the strategy keys ---------------------------------------------------------------------------

def test_strategy_keys_parse_describe_and_round_trip():
    s = parse_strategy("tp=8,pp=16,dp=2,pp_layout=Et|(tt|)*30,mL")  # the comma in the layout is cosmetic
    assert s.pp_layout == "Et|(tt|)*30,mL" and not s.pp_embedding and not s.pp_loss
    flags = parse_strategy("pp=16,vp=8,pp_embedding=1,pp_loss=on")
    assert flags.pp_embedding and flags.pp_loss
    assert "pp_embedding=1,pp_loss=1" in flags.describe()
    assert "pp_" not in Strategy().describe()
    assert "pp_layout=Et|(tt|)*30mL," in s.describe()  # without the cosmetic comma: one item of the grammar
    assert parse_layout(parse_strategy(s.describe()).pp_layout) == parse_layout(s.pp_layout)
    with pytest.raises(StrategyError, match=r"^strategy.pp_layout='E\|x': has unknown symbol 'x'"):
        parse_strategy("pp_layout=E|x")


def resolve(text: str, num_layers: int = 126, num_gpus: int = 2048) -> Strategy:
    return resolve_strategy(parse_strategy(text), num_gpus=num_gpus, model_name="llama-3.1-405b", constraints={},
                            num_pipeline_units=num_layers, global_batch=2048, seq_len=8192)[0]


def test_resolve_counts_the_embedding_and_loss_slots():
    assert resolve("tp=8,pp=16,vp=8,pp_embedding=1,pp_loss=1").vp == 8
    # 126 layers + embedding + loss = 128 chunks: the only split Megatron runs, taken when neither flag is given
    implied = resolve("tp=8,pp=16,vp=8")
    assert implied.pp_embedding and implied.pp_loss
    with pytest.raises(StrategyError, match=r"exceeds the 126 layers .*, or pp_embedding=1,pp_loss=1 \(Megatron"):
        resolve("tp=8,pp=16,vp=8,pp_embedding=0")  # turned off by hand: refused, the way out named
    with pytest.raises(StrategyError, match=r"exceeds the 126 layers .*, or pp_embedding=1 or pp_loss=1 "):
        resolve("tp=8,pp=127", num_gpus=8 * 127)
    with pytest.raises(StrategyError, match=r"allowed: pp\*vp <= 126$"):
        resolve("tp=8,pp=32,vp=8")  # 256 chunks: no slot count fills them
    with pytest.raises(StrategyError, match="127 slots"):
        resolve("tp=8,pp=16,vp=8,pp_embedding=1")


def test_resolve_takes_vp_from_the_layout_unless_given():
    assert resolve("tp=8,pp=16,pp_layout=E|(t|)*126,L").vp == 8
    assert resolve("tp=8,pp=16,vp=4,pp_layout=Et|(tt|)*62,tL").vp == 4
    with pytest.raises(StrategyError, match=r"has 128 chunks .* but pp\*vp=16\*4=64"):
        resolve("tp=8,pp=16,vp=4,pp_layout=E|(t|)*126,L")
    with pytest.raises(StrategyError, match=r"has 127 chunks .*, not a multiple of pp=16"):
        resolve("tp=8,pp=16,pp_layout=E|(t|)*125,L")


# --- plans: units placed by the layout, empty chunks -----------------------------------------------

SMALL = DecoderModel(name="small", num_layers=6, hidden_size=1024, num_heads=8, ffn_hidden_size=4096,
                     vocab_size=1024, max_seq_len=1024)


def plan_of(model: DecoderModel, text: str, num_gpus: int = 4, batch: int = 8):
    s, gb = resolve_strategy(parse_strategy(text + ",recompute=none"), num_gpus=num_gpus, model_name=model.name,
                             constraints={}, num_pipeline_units=model.num_layers, global_batch=batch,
                             seq_len=1024)
    return build_plan(build_workload(model, Task(kind="pretrain")), s, domain_size=8, seq_len=1024,
                      global_batch=gb, dtype=DType.BF16)


def test_plan_places_units_where_the_layout_says():
    plan = plan_of(SMALL, "pp=2,pp_layout=E||ttt|tttL")
    assert plan.stages == ((("embedding",), ("layer",) * 3), ((), ("layer",) * 3 + ("head",)))


def test_plan_places_mtp_units_and_checks_their_count():
    mtp = SMALL.model_copy(update={"mtp_layers": 1})
    plan = plan_of(mtp, "pp=2,pp_layout=Ettt|tt|t|mL")
    assert plan.stages == ((("embedding", "layer", "layer", "layer"), ("layer",)),
                           (("layer", "layer"), ("mtp", "head")))
    with pytest.raises(StrategyError, match=r"places 0 MTP layers .* the model has 1"):
        plan_of(mtp, "pp=2,pp_layout=Ettt|tttL")


def test_a_stage_of_empty_chunks_holds_no_memory_but_reserved():
    plan = plan_of(SMALL, "pp=4,pp_layout=E|||t*6L")
    assert plan.stages[1] == ((),)
    memory = stage_memory(plan, 1, 1.0)
    assert memory.total_bytes == 1.0


def test_a_simulation_runs_through_empty_chunks():
    from madmax import api

    # Stages 1 and 2 hold nothing; stage 3 all six layers and the head: the iteration is one GPU's work,
    # give or take the embedding on stage 0 and the sends -- within 5% of the same work on one GPU.
    empty = api.simulate(SMALL, "dgx-h100", 4, global_batch=8, seq_len=1024,
                         strategy="pp=4,pp_layout=E|||t*6L,recompute=none")
    alone = api.simulate(SMALL, "dgx-h100", 1, global_batch=8, seq_len=1024, strategy="pp=1,recompute=none")
    assert empty.iteration_time_s == pytest.approx(alone.iteration_time_s, rel=0.05)
    assert empty.memory["stage"] == 3
    interleaved = api.simulate(SMALL, "dgx-h100", 4, global_batch=8, seq_len=1024,
                               strategy="pp=4,pp_layout=E|t||t|t|t|t|tL,recompute=none")
    assert "vp=2" in interleaved.strategy and interleaved.iteration_time_s < empty.iteration_time_s


# --- the command line ---------------------------------------------------------------------------

runner = CliRunner()
LLAMA_405B = ["simulate", "-m", "llama-3.1-405b", "-s", "dgx-h100", "--num-gpus", "2048", "--global-batch", "256",
              "--seq-len", "8192"]


def test_cli_simulates_405b_with_pp16_vp8_and_both_flags():
    result = runner.invoke(app, [*LLAMA_405B, "--strategy", "tp=8,pp=16,vp=8,pp_embedding=1,pp_loss=1"])
    assert result.exit_code == 0, result.output
    assert "pp_embedding=1,pp_loss=1" in result.stdout


def test_cli_simulates_405b_with_pp16_vp8_saying_which_split_it_took():
    result = runner.invoke(app, [*LLAMA_405B, "--strategy", "tp=8,pp=16,vp=8"])
    assert result.exit_code == 0, result.output
    assert "pp_embedding=1,pp_loss=1" in result.stdout
    assert "assumed: pp*vp=16*8 = the 126 layers + 2" in result.stdout


def test_cli_simulates_a_layout_with_empty_chunks():
    result = runner.invoke(app, [*LLAMA_405B, "--strategy", "tp=8,pp=16,pp_layout=E|(t|)*126,L"])
    assert result.exit_code == 0, result.output
    assert "vp=8" in result.stdout


def test_cli_bad_layout_exits_2_with_one_line():
    result = runner.invoke(app, [*LLAMA_405B, "--strategy", "tp=8,pp=16,pp_layout=E|(t|)*125,tt|L"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: strategy.pp_layout="), result.stderr
    assert "places 127 transformer layers" in lines[0] and "allowed: 126 't'" in lines[0]
