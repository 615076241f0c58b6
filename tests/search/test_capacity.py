"""The capacity search (madmax.search.capacity): SLO parsing, the fewest replicas that meet the SLOs (checked
against rate-mode simulations), the closest units when nothing meets, and the CLI and API surfaces."""

from __future__ import annotations

import json
import math
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.errors import ConfigError
from madmax.search.capacity import closest, find_capacity, rows
from madmax.serve.slo import missed, parse_slos

# Llama-3.1-8B in fp8 on H100, 512 in + 64 out tokens; 200 requests per simulation keep each under a second.
SMALL = {"prompt_len": 512, "output_len": 64, "dtypes": ["fp8"], "kv_dtypes": ["fp8"], "max_pp": 1,
         "num_requests": 200}


def test_slos_parse_in_seconds_from_text_or_a_mapping():
    assert parse_slos("p99_ttft=1, p99_tpot=50ms,mean_e2e=2.5s") == {"p99_ttft": 1.0, "p99_tpot": 0.05,
                                                                     "mean_e2e": 2.5}
    assert parse_slos({"P90_ITL": "20 ms"}) == {"p90_itl": 0.02}
    assert parse_slos(None) == {}


@pytest.mark.parametrize("text, names", [
    ("p95_ttft=1", "'p95_ttft' is unknown"), ("p99_latency=1", "'p99_latency' is unknown"),
    ("p99_ttft=0", "positive time"), ("p99_ttft=-1", "positive time"), ("p99_ttft=nan", "positive time"),
    ("p99_ttft=inf", "positive time"), ("p99_ttft=1h", "positive time"), ("p99_ttft=1e308", "up to 86,400 s"),
    ("p99_ttft", "has no value"),
    ("p99_ttft=1,p99_ttft=2", "given twice"), (",", "empty")])
def test_a_bad_slo_is_one_sentence_naming_it(text, names):
    with pytest.raises(ConfigError, match=names) as err:
        parse_slos(text)
    assert "\n" not in str(err.value) and "allowed" in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_slo_text_parses_or_is_refused(text):
    try:
        slos = parse_slos(text)
    except ConfigError:
        return
    assert slos and all(math.isfinite(v) and v > 0 for v in slos.values())


@pytest.fixture(scope="module")
def found():
    return find_capacity("llama-3.1-8b", "dgx-h100", request_rate=120, slo="p99_ttft=300ms,p99_tpot=15ms",
                         max_tp=2, exact=2, top=2, **SMALL)


def one_replica(found, plan, rate):
    u = plan.unit
    return api.simulate("llama-3.1-8b", "dgx-h100", u.gpus, task="inference", mode="rate", request_rate=rate,
                        prompt_len=512, output_len=64, dtype=u.dtype, kv_dtype=u.kv_dtype, strategy=u.strategy(),
                        num_requests=200)


def test_the_fewest_replicas_meet_the_slos_and_one_fewer_misses(found):
    best = found.meeting()[0]
    assert best.replicas > 1  # the rate needs several replicas: the search had something to find
    at_rate = one_replica(found, best, found.request_rate / best.replicas)
    assert missed(at_rate, found.slos) == []
    assert at_rate.latency == best.result.latency  # the row's numbers are simulate's
    fewer = one_replica(found, best, found.request_rate / (best.replicas - 1))
    assert missed(fewer, found.slos)  # e.g. ['p99_tpot 16.2 ms > 15.0 ms']
    assert best.rate_missed == pytest.approx(found.request_rate / (best.replicas - 1))


def test_the_best_is_confirmed_by_the_printed_simulate_command(found):
    best = found.meeting()[0]
    assert best.confirmed is not None and missed(best.confirmed, found.slos) == []
    command = shlex.split(found.confirm_command(best))
    assert command[:2] == ["madmax", "simulate"]
    result = CliRunner().invoke(app, [*command[1:], "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.output)
    assert run["num_gpus"] == best.num_gpus
    assert run["latency"]["ttft_s"]["p99"] == pytest.approx(best.confirmed.latency["ttft_s"]["p99"])


def test_rows_rank_meeting_deployments_by_gpus_then_the_screened_rest(found):
    table = rows(found)
    simulated = [r for r in table if r["simulated"]]
    assert [r["simulated"] for r in table] == sorted((r["simulated"] for r in table), reverse=True)
    meeting = [r for r in simulated if r["meets"]]
    assert meeting and [r["num_gpus"] for r in meeting] == sorted(r["num_gpus"] for r in meeting)
    assert all(r["p99_ttft_s"] <= 0.3 and r["p99_tpot_s"] <= 0.015 for r in meeting)
    assert meeting[0]["num_gpus"] == meeting[0]["replicas"] * meeting[0]["gpus_per_replica"]
    # 10.2 kW per DGX H100 node of 8 GPUs
    assert meeting[0]["power_w"] == pytest.approx(10_200 / 8 * meeting[0]["num_gpus"])


def test_unreachable_slos_list_the_closest_units_and_what_each_misses():
    found = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=5, slo="p99_ttft=5ms", max_tp=2, **SMALL)
    assert found.meeting() == [] and found.plans == []
    assert found.rejected["slo at zero load"] == 2
    near = closest(found, 5)
    assert [u.tp for u, _ in near] == [2, 1]  # tp=2 prefills a prompt faster: closer
    assert all(m[0].startswith("p99_ttft ") and m[0].endswith("> 5.0 ms with one request alone") for _, m in near)


def test_a_gpu_cap_below_the_need_names_the_gpus_needed():
    found = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=120, slo="p99_ttft=300ms,p99_tpot=15ms",
                          max_tp=1, exact=1, top=1, max_gpus=1, **SMALL)
    assert found.meeting() == []
    (_, misses), = closest(found, 3)
    assert misses[0].startswith("needs ") and misses[0].endswith("GPUs; allowed: at most max_gpus=1")


def test_cost_needs_a_price_and_ranks_by_it():
    with pytest.raises(ConfigError, match="objective cost needs a price for system dgx-h100"):
        find_capacity("llama-3.1-8b", "dgx-h100", request_rate=5, slo="p99_ttft=1", objective="cost", **SMALL)
    priced = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=5, slo="p99_ttft=1", objective="cost",
                           price=2.5, max_tp=1, exact=1, top=1, **SMALL)
    best = rows(priced)[0]
    assert best["usd_per_hour"] == pytest.approx(2.5 * best["num_gpus"])
    per_million = best["usd_per_hour"] / (5 * 64 * 3600) * 1e6
    assert best["usd_per_million_output_tokens"] == pytest.approx(per_million)


@pytest.mark.parametrize("kwargs, names", [
    ({"slo": None}, "needs at least one SLO"), ({"request_rate": 0}, "request_rate"),
    ({"request_rate": float("nan")}, "request_rate"), ({"objective": "time"}, "not a serving objective"),
    ({"top": 0}, "top=0"), ({"num_requests": -1}, "num_requests=-1"), ({"exact": 1, "top": 2}, "exact=1"),
    ({"slo": "p99_tpot=10ms", "output_len": 1}, "needs a second output token"),
    ({"max_gpus": 2**21}, "beyond the 1,048,576 GPUs a deployment is planned with"),
    ({"deployments": "both"}, "deployments='both' is not a kind of deployment; allowed: aggregated, disaggregated"),
    ({"deployments": ["aggregated", "disaggregated"], "prefix_len": 64}, "prefix_len is modelled on aggregated"),
    ({"deployments": "disaggregated", "speculative": "ngram"}, "speculative is modelled on aggregated")])
def test_bad_inputs_are_refused(kwargs, names):
    args = {"request_rate": 5.0, "slo": "p99_ttft=1", **SMALL, **kwargs}
    with pytest.raises(ConfigError, match=names):
        find_capacity("llama-3.1-8b", "dgx-h100", **args)


def test_the_api_returns_a_frame_and_the_serving_layout_search_too():
    frame = api_search(request_rate=5, slo={"p99_ttft": 1.0}, max_tp=1, exact=1, top=1)
    assert frame.loc[0, "meets"] and frame.attrs["confirm"].startswith("madmax simulate")
    layouts = api_search(num_gpus=2, prompt_len=512, output_len=64, dtypes=["fp8"], kv_dtypes=["fp8"], top=1,
                         exact=1)
    assert layouts.loc[0, "simulated"] and layouts.loc[0, "output_tokens_per_s_per_gpu"] > 0
    with pytest.raises(ConfigError, match="needs the load: request_rate"):
        api_search(slo="p99_ttft=1")
    with pytest.raises(ConfigError, match="global_batch applies to training searches"):
        api_search(global_batch=8, request_rate=5, slo="p99_ttft=1")


def api_search(num_gpus=None, **options):
    import madmax

    args = {**SMALL, **options} if "request_rate" in options or "slo" in options else options
    return madmax.search("llama-3.1-8b", "dgx-h100", num_gpus, task="inference", **args)


CLI = ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--task", "inference", "--prompt-len", "512",
       "--output-len", "64", "--dtypes", "fp8", "--kv-dtypes", "fp8", "--max-pp", "1", "--max-tp", "1",
       "--num-requests", "200", "--exact", "1", "--top", "1", "--no-progress"]


def test_cli_prints_the_deployments_and_the_confirming_command():
    result = CliRunner().invoke(app, [*CLI, "--request-rate", "5", "--slo", "p99_ttft=1,p99_tpot=20ms"])
    assert result.exit_code == 0, result.output
    assert "Top 1 deployments by GPUs" in result.output and "madmax simulate -m llama-3.1-8b" in result.output
    out = CliRunner().invoke(app, [*CLI, "--request-rate", "5", "--slo", "p99_ttft=1", "--json"])
    data = json.loads(out.output)
    assert data["slo"] == {"p99_ttft": 1.0} and data["deployments"][0]["meets"] and data["closest"] == []


@pytest.mark.parametrize("extra, names", [
    (["--slo", "p99_ttft=1"], "needs the load"),
    (["--request-rate", "5", "--slo", "p95_ttft=1"], "'p95_ttft' is unknown"),
    (["--request-rate", "5", "--slo", "p99_ttft=1", "--mode", "saturation"], "mode does not apply"),
    (["--request-rate", "5", "--slo", "p99_ttft=1", "--max-ttft", "1"], "max_ttft does not apply"),
    (["--request-rate", "5", "--slo", "p99_ttft=1", "--objective", "time"], "not a serving objective"),
    (["--request-rate", "-5", "--slo", "p99_ttft=1"], "request_rate"),
    (["--request-rate", "5", "--slo", "p99_ttft=1", "--deployments", "disagg"], "deployments='disagg' is not a kind")])
def test_cli_bad_capacity_inputs_exit_2_in_one_line(extra, names):
    result = CliRunner().invoke(app, [*CLI, *extra])
    assert result.exit_code == 2 and names in result.output
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def split():
    return find_capacity("llama-3.1-8b", "dgx-h100", request_rate=60, slo="p99_ttft=300ms,p99_tpot=15ms",
                         max_tp=2, exact=2, top=2, deployments="disaggregated", **SMALL)


def test_disaggregated_units_are_prefill_and_decode_workers_as_simulate_runs_them(split):
    from madmax.serve.slo import steady_requests

    best = split.meeting()[0]
    u = best.unit
    assert u.disaggregated and u.mode == "disaggregated" and all(v.disaggregated for v in split.screened)
    assert u.gpus == u.prefill.count * u.prefill.tp + u.decode.count * u.decode.tp
    # one replica at its share of the rate is simulate's disaggregated run of its workers
    n = steady_requests(split.request_rate / best.replicas, 200, u.lifetime_s)
    one = api.simulate("llama-3.1-8b", "dgx-h100", u.gpus, task="inference", mode="disaggregated",
                       request_rate=split.request_rate / best.replicas, prompt_len=512, output_len=64, dtype=u.dtype,
                       kv_dtype=u.kv_dtype, strategy=u.strategy(), num_requests=n)
    assert one.latency == best.result.latency and missed(one, split.slos) == []
    # the whole deployment, k times the workers, by the printed command
    command = shlex.split(split.confirm_command(best))
    assert command[command.index("--mode") + 1] == "disaggregated"
    assert f"prefill_workers={best.replicas * u.prefill.count}," in command[command.index("--strategy") + 1]
    result = CliRunner().invoke(app, [*command[1:], "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.output)
    assert run["num_gpus"] == best.num_gpus
    assert run["latency"]["ttft_s"]["p99"] == pytest.approx(best.confirmed.latency["ttft_s"]["p99"])


def test_disaggregated_rows_name_their_workers_and_every_deployment_is_whole_nodes(split, found):
    table = rows(split)
    assert {r["deployment"] for r in table} == {"disaggregated"}
    best = table[0]
    assert best["replica"] == f"P{best['prefill_workers']}(tp={best['prefill_tp']})+D{best['decode_workers']}" \
                              f"(tp={best['decode_tp']})" and best["tp"] is None
    for r in [*table, *rows(found)]:  # at most one node of 8, or whole nodes: a cluster simulate takes
        assert r["num_gpus"] is None or r["num_gpus"] <= 8 or r["num_gpus"] % 8 == 0
    assert {r["deployment"] for r in rows(found)} == {"aggregated"}  # the default plans replicas of one engine


def test_replicas_round_up_to_whole_nodes():
    from madmax.search.capacity import whole_nodes

    assert [whole_nodes(k, 2, 8) for k in (1, 4, 5, 8, 9)] == [1, 4, 8, 8, 12]
    assert whole_nodes(3, 16, 8) == 3 and whole_nodes(1, 8, 8) == 1


def test_simulate_holds_a_disaggregated_rate_against_the_slos():
    disagg = {**SERVE, "mode": "disaggregated", "strategy": "prefill_workers=1,decode_workers=1"}
    held = api.simulate("llama-3.1-8b", "dgx-h100", 2, request_rate=20, slo="p99_ttft=1,p99_tpot=2ms", **disagg)
    assert held.slo["measured"]["p99_ttft"] == held.latency["ttft_s"]["p99"] and not held.slo["met"]
    best = api.simulate("llama-3.1-8b", "dgx-h100", 2, slo="p99_ttft=300ms,p99_tpot=15ms", **disagg)
    assert best.slo["met"] and best.slo["rate_missed"] / best.slo["highest_rate"] <= 1.02 + 1e-9
    with pytest.raises(ConfigError, match="batch runs the disaggregated workers in a closed loop"):
        api.simulate("llama-3.1-8b", "dgx-h100", 2, batch=8, slo="p99_ttft=1", **disagg)


def test_deployments_outside_a_capacity_search_are_refused():
    result = CliRunner().invoke(app, [*CLI[:CLI.index("--num-requests")], "--deployments", "disaggregated"])
    assert result.exit_code == 2 and "deployments applies to a capacity search" in result.output


def test_a_model_file_is_searched_and_its_command_names_the_file(tmp_path):
    # The search simulated the model by its name, which only the catalog knows: a file's model was refused.
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nnum_layers: 4\nhidden_size: 512\nnum_heads: 8\nnum_kv_heads: 4\n"
                    "ffn_hidden_size: 1024\nvocab_size: 1024\nmax_seq_len: 2048\n")
    found = find_capacity(str(path), "dgx-h100", request_rate=1, slo="p99_ttft=1", prompt_len=64, output_len=8,
                          max_tp=1, max_pp=1, exact=1, top=1, num_requests=20)
    best = found.meeting()[0]
    assert found.model == "tiny" and f"-m {path} " in found.confirm_command(best)


SERVE = {"task": "inference", "mode": "rate", "prompt_len": 512, "output_len": 64, "dtype": "fp8", "kv_dtype": "fp8",
         "strategy": "tp=1", "num_requests": 200}


def test_simulate_holds_a_rate_against_the_slos():
    r = api.simulate("llama-3.1-8b", "dgx-h100", 1, request_rate=20, slo="p99_ttft=1,p99_tpot=5ms", **SERVE)
    p99_ttft, p99_tpot = r.latency["ttft_s"]["p99"], r.latency["tpot_s"]["p99"]
    assert r.slo["measured"] == {"p99_ttft": p99_ttft, "p99_tpot": p99_tpot}
    assert p99_ttft < 1 < p99_tpot * 200  # the TTFT limit is met, the 5 ms TPOT one is not
    assert not r.slo["met"] and r.slo["missed"] == [f"p99_tpot {p99_tpot * 1e3:,.1f} ms > 5.0 ms"]


def test_simulate_without_a_rate_finds_the_highest_that_meets_the_slos():
    r = api.simulate("llama-3.1-8b", "dgx-h100", 1, slo="p99_ttft=300ms,p99_tpot=15ms", **SERVE)
    best, above, n = r.slo["highest_rate"], r.slo["rate_missed"], r.slo["num_requests"]
    assert r.slo["met"] and above / best <= 1.02 + 1e-9 and r.slo["missed_at_rate_missed"]
    # each rate runs at least ten lifetimes of a request (its median end-to-end latency, ~0.3 s): more than 200
    assert n > 200 and n >= best * 10 * 0.25
    at_best = api.simulate("llama-3.1-8b", "dgx-h100", 1, request_rate=best, **{**SERVE, "num_requests": n})
    assert r.latency == at_best.latency  # the result is the run at that rate
    slos = {"p99_ttft": 0.3, "p99_tpot": 0.015}
    assert missed(at_best, slos) == []
    twice = api.simulate("llama-3.1-8b", "dgx-h100", 1, request_rate=2 * best, **{**SERVE, "num_requests": 2 * n})
    assert missed(twice, slos)


def test_a_rate_is_simulated_over_ten_lifetimes_of_a_request():
    from madmax.serve.slo import steady_requests

    assert steady_requests(400, 300, 0.8) == 3200  # 10 x 0.8 s at 400/s
    assert steady_requests(1, 300, 0.8) == 300 and steady_requests(1e5, 300, 10) == 20_000


@pytest.mark.parametrize("kwargs, names", [
    ({"mode": "static"}, "task=inference with mode=rate"), ({"seed": 3}, "seed draws the Poisson arrivals"),
    ({"slo": "p99_ttft=1us"}, "positive time"), ({"slo": "p99_ttft=1ms"}, "no request rate down to")])
def test_simulate_refuses_slos_it_cannot_hold(kwargs, names):
    with pytest.raises(ConfigError, match=names):
        api.simulate("llama-3.1-8b", "dgx-h100", 1, **{**SERVE, "slo": "p99_ttft=1", **kwargs})


def test_cli_simulate_prints_the_highest_rate_and_each_slo():
    argv = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "1", "--task", "inference", "--mode",
            "rate", "--prompt-len", "512", "--output-len", "64", "--dtype", "fp8", "--strategy", "tp=1",
            "--num-requests", "200", "--slo", "p99_ttft=300ms,p99_tpot=15ms"]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    assert "highest rate within the SLOs" in out.output and "slo p99_tpot" in out.output
    bad = CliRunner().invoke(app, [*argv[:-1], "p99_ttft=1", "--task", "pretrain"])
    assert bad.exit_code == 2 and "task=inference with mode=rate" in bad.output


def test_mlperf_scenarios_set_the_mode_and_the_benchmarks_p99_limits():
    from madmax.config.scenarios import scenario

    # mlcommons/inference loadgen/mlperf.conf: llama3_1-8b Server 2000/100 ms, interactive 500/30 ms; llama2-70b
    # interactive 450/40 ms; deepseek-r1 (DeepSeek-V3's architecture) Server 2000/80 ms
    assert scenario("server", "llama-3.1-8b").slo == {"p99_ttft": 2.0, "p99_tpot": 0.1}
    assert scenario("interactive", "llama-3.1-8b").slo == {"p99_ttft": 0.5, "p99_tpot": 0.03}
    assert scenario("Interactive", "llama-2-70b").slo == {"p99_ttft": 0.45, "p99_tpot": 0.04}
    assert scenario("server", "deepseek-v3").slo == {"p99_ttft": 2.0, "p99_tpot": 0.08}
    assert scenario("offline", "gpt-oss-120b").mode == "saturation"
    with pytest.raises(ConfigError, match="no MLPerf Inference benchmark runs gpt-oss-120b"):
        scenario("server", "gpt-oss-120b")
    with pytest.raises(ConfigError, match="mixtral-8x7b has no interactive limits"):
        scenario("interactive", "mixtral-8x7b")
    with pytest.raises(ConfigError, match="scenario='singlestream' is unknown"):
        scenario("singlestream", "llama-3.1-8b")


def test_the_server_scenario_is_the_highest_rate_within_its_limits():
    r = api.simulate("llama-3.1-8b", "dgx-h100", 1, scenario="interactive", **{**SERVE, "mode": None})
    assert r.mode == "rate" and r.slo["limits"] == {"p99_ttft": 0.5, "p99_tpot": 0.03} and r.slo["met"]
    assert r.assumptions[0].startswith("MLPerf Inference llama3_1-8b interactive scenario")
    with pytest.raises(ConfigError, match="mode=static conflicts with scenario=interactive"):
        api.simulate("llama-3.1-8b", "dgx-h100", 1, scenario="interactive", **{**SERVE, "mode": "static"})
    with pytest.raises(ConfigError, match="both set the latency limits"):
        api.simulate("llama-3.1-8b", "dgx-h100", 1, scenario="server", slo="p99_ttft=1", **{**SERVE, "mode": None})
    found = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=5, scenario="server", max_tp=1, exact=1, top=1,
                          **SMALL)
    assert found.slos == {"p99_ttft": 2.0, "p99_tpot": 0.1} and found.meeting()
    with pytest.raises(ConfigError, match="no latency limits to plan capacity against"):
        find_capacity("llama-3.1-8b", "dgx-h100", request_rate=5, scenario="offline", **SMALL)


def test_prefix_caching_and_speculative_decoding_serve_every_candidate():
    plain = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=120, slo="p99_ttft=300ms,p99_tpot=15ms",
                          max_tp=1, exact=1, top=1, **SMALL)
    faster = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=120, slo="p99_ttft=300ms,p99_tpot=15ms",
                           max_tp=1, exact=1, top=1, prefix_len=256, speculative="eagle", draft_len=3, acceptance=0.7,
                           **SMALL)
    best, fast = plain.meeting()[0], faster.meeting()[0]
    assert fast.num_gpus <= best.num_gpus and fast.rate_per_replica >= best.rate_per_replica
    command = faster.confirm_command(fast)
    assert command.endswith("--prefix-len 256 --speculative eagle --draft-len 3 --acceptance 0.7")
    run = json.loads(CliRunner().invoke(app, [*shlex.split(command)[1:], "--json"]).output)
    assert run["latency"]["ttft_s"]["p99"] == pytest.approx(fast.confirmed.latency["ttft_s"]["p99"])


# --- an arrivals trace instead of a Poisson rate -----------------------------------------------------------------


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """300 requests at about 60/s (exponential gaps), prompts of 200-1,500 tokens and outputs of 20-200, seeded."""
    import numpy as np

    rng = np.random.default_rng(3)
    arrival = np.cumsum(rng.exponential(1 / 60.0, 300))
    prompt, output = rng.integers(200, 1500, 300), rng.integers(20, 200, 300)
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    path.write_text("arrival_s,prompt_len,output_len\n" + "".join(
        f"{a - arrival[0]:.4f},{p},{o}\n" for a, p, o in zip(arrival, prompt, output, strict=True)))
    return path


@pytest.fixture(scope="module")
def traced(trace):
    return find_capacity("llama-3.1-8b", "dgx-h100", arrivals=trace, slo="p99_ttft=200ms,p99_tpot=15ms",
                         dtypes=["fp8"], kv_dtypes=["fp8"], exact=2, top=2)


def test_a_trace_sets_the_rate_and_the_lengths(traced, trace):
    import csv

    rows_ = list(csv.DictReader(trace.read_text().splitlines()))
    times = [float(r["arrival_s"]) for r in rows_]
    assert traced.request_rate == pytest.approx((len(times) - 1) / (times[-1] - times[0]))  # (n - 1) / span
    assert traced.prompt_len == round(sum(int(r["prompt_len"]) for r in rows_) / len(rows_))
    assert traced.output_len == round(sum(int(r["output_len"]) for r in rows_) / len(rows_))


def test_a_trace_is_dealt_round_robin_and_confirmed_whole(traced, trace, tmp_path):
    best = traced.meeting()[0]
    assert best.replicas > 1  # the trace needs several replicas
    # one replica of k serves every k-th request: the plan's row is that simulation
    lines = trace.read_text().splitlines()
    share = tmp_path / "share.csv"
    share.write_text("\n".join([lines[0], *lines[1::best.replicas]]) + "\n")
    u = best.unit
    alone = api.simulate("llama-3.1-8b", "dgx-h100", u.gpus, task="inference", mode="rate", arrivals=str(share),
                         dtype=u.dtype, kv_dtype=u.kv_dtype, strategy=u.strategy())
    assert alone.latency["ttft_s"]["p99"] == pytest.approx(best.result.latency["ttft_s"]["p99"], rel=1e-9)
    # the whole deployment on the whole trace, by the printed command
    command = shlex.split(traced.confirm_command(best))
    assert "--arrivals" in command and "--request-rate" not in command
    result = CliRunner().invoke(app, [*command[1:], "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["latency"]["ttft_s"]["p99"] == pytest.approx(
        best.confirmed.latency["ttft_s"]["p99"])


@pytest.mark.parametrize("extra, names", [
    ({"request_rate": 5.0}, "request_rate and arrivals both describe the load"),
    ({"prompt_len": 512}, "prompt_len and arrivals both describe the load"),
    ({"num_requests": 100}, "num_requests and arrivals both describe the load")])
def test_a_trace_with_the_options_it_replaces_is_refused(trace, extra, names):
    with pytest.raises(ConfigError, match=names):
        find_capacity("llama-3.1-8b", "dgx-h100", arrivals=trace, slo="p99_ttft=1", **extra)


def test_a_trace_without_a_rate_and_no_load_at_all_are_refused(tmp_path):
    one = tmp_path / "one.csv"
    one.write_text("arrival_s,prompt_len,output_len\n0,128,16\n")
    with pytest.raises(ConfigError, match="no rate to plan for"):
        find_capacity("llama-3.1-8b", "dgx-h100", arrivals=one, slo="p99_ttft=1")
    with pytest.raises(ConfigError, match="needs the load"):
        find_capacity("llama-3.1-8b", "dgx-h100", slo="p99_ttft=1", prompt_len=128, output_len=16)
    out = CliRunner().invoke(app, ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--task", "inference",
                                   "--arrivals", str(one), "--slo", "p99_ttft=1"])
    assert out.exit_code == 2 and "no rate to plan for" in out.output


def test_a_trace_under_the_web_servers_file_policy(trace, tmp_path):
    # the search's per-replica traces are scratch files read back under the same policy as the user's: inside
    # the server's data folder when files are restricted, and gone afterwards
    import shutil

    from madmax.config.checks import files_under
    from madmax.errors import MadmaxError

    shutil.copy(trace, tmp_path / "trace.csv")
    with files_under(tmp_path):
        found = find_capacity("llama-3.1-8b", "dgx-h100", arrivals=tmp_path / "trace.csv", slo="p99_ttft=300ms",
                              dtypes=["fp8"], kv_dtypes=["fp8"], exact=1, top=1)
        assert found.meeting() and sorted(p.name for p in tmp_path.iterdir()) == ["trace.csv"]
        with pytest.raises(MadmaxError, match="outside this server's data directory"):
            find_capacity("llama-3.1-8b", "dgx-h100", arrivals=trace, slo="p99_ttft=300ms")


def test_drawn_lengths_reach_every_simulation_of_a_capacity_search():
    found = find_capacity("llama-3.1-8b", "dgx-h100", request_rate=5, slo="p99_ttft=1,p99_tpot=50ms",
                          prompt_len_std=128, output_len_std=16, max_tp=1, **SMALL)
    best = found.meeting()[0]
    assert "--prompt-len-std 128" in found.confirm_command(best)
    assert "--output-len-std 16" in found.confirm_command(best)
    # The plan's own simulation drew them, and says so.
    assert any(a.startswith("request lengths drawn") for a in best.result.assumptions)


def test_a_layout_search_refuses_drawn_lengths_in_one_sentence():
    out = CliRunner().invoke(app, ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--task", "inference",
                                   "--prompt-len", "128", "--output-len", "16", "--prompt-len-std", "8"])
    assert out.exit_code == 2 and "prompt_len_std applies to a capacity search" in out.output
