"""The HTTP API against the Python API: the same results, the same one-sentence errors, bounded inputs."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import madmax
from madmax.errors import MadmaxError

pytest.importorskip("fastapi", reason="the web app needs fastapi (pip install madmax[web])")

from madmax.web import Settings, create_app
from madmax.web.schemas import SearchRequest, SimulateRequest

SMALL = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 64, "strategy": "tp=2"}


def api_error(**kwargs) -> str:
    with pytest.raises(MadmaxError) as caught:
        madmax.simulate(**kwargs)
    return str(caught.value)


def test_simulate_answers_the_python_apis_to_dict(client):
    response = client.post("/simulate", json=SMALL)
    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps(madmax.simulate(**SMALL).to_dict()))


def test_serving_simulate_answers_the_python_apis_to_dict(client):
    body = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 1, "task": "inference", "prompt_len": 512,
            "output_len": 64, "batch": 4}
    response = client.post("/simulate", json=body)
    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps(madmax.simulate(**body).to_dict()))


def test_request_fields_are_the_python_apis_keyword_arguments():
    assert "keep_schedule" not in SimulateRequest.model_fields  # the server decides it
    assert {"model", "system", "num_gpus", "strategy", "stack", "calibration"} <= set(SimulateRequest.model_fields)
    assert {"objective", "top", "max_tp", "zero", "finetune", "prompt_len", "dtypes", "time_limit_s"} <= set(
        SearchRequest.model_fields)
    assert "workers" not in SearchRequest.model_fields


@pytest.mark.parametrize("bad", [{"strategy": "tp=3"}, {"model": "llama-3-8bx"}, {"num_gpus": 12},
                                 {"strategy": "tp=2,bogus=1"}, {"task": "inference", "global_batch": 8}])
def test_bad_input_is_a_400_with_the_python_apis_sentence(client, bad):
    body = {**SMALL, **bad}
    if "num_gpus" in bad or "task" in bad:
        body.pop("strategy")
    response = client.post("/simulate", json=body)
    assert response.status_code == 400
    assert response.json() == {"error": api_error(**body)}


def test_unknown_field_malformed_json_and_wrong_types_are_422_sentences(client):
    unknown = client.post("/simulate", json={**SMALL, "gpus": 8})
    assert unknown.status_code == 422
    assert unknown.json() == {"error": "gpus is not a field of the request; see GET /openapi.json for the allowed "
                                       "fields"}
    malformed = client.post("/simulate", content=b'{"model": ', headers={"content-type": "application/json"})
    assert malformed.status_code == 422
    assert malformed.json()["error"].startswith("the request body is not valid JSON")
    typed = client.post("/simulate", json={**SMALL, "num_gpus": "eight"})
    assert typed.status_code == 422
    assert typed.json()["error"].startswith("num_gpus='eight': ")
    missing = client.post("/simulate", json={"model": "llama-3-8b"})
    assert missing.json() == {"error": "system is required"}
    not_object = client.post("/simulate", json=[1, 2])
    assert not_object.status_code == 422


def test_a_body_over_one_megabyte_is_refused_before_parsing(client):
    big = {**SMALL, "model": {"name": "x", "padding": "a" * 2**20}}
    response = client.post("/simulate", json=big)
    assert response.status_code == 413
    assert response.json()["error"].startswith("the request body is over 1 MB")


def test_an_uploaded_hf_config_is_a_model_dict(client):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
              "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    body = {**SMALL, "model": config}
    response = client.post("/simulate", json=body)
    assert response.status_code == 200
    assert response.json()["iteration_time_s"] == madmax.simulate(**body).iteration_time_s


def test_simulate_view_adds_what_the_page_draws(client):
    body = {**SMALL, "num_gpus": 16, "strategy": "tp=2,pp=2"}
    view = client.post("/simulate/view", json=body).json()
    expected = madmax.simulate(**body, keep_schedule=True)
    assert view["result"]["iteration_time_s"] == expected.iteration_time_s
    assert [s["stage"] for s in view["memory_per_stage"]] == [0, 1]
    assert sum(s for _, s in view["bars"]["iteration"]) > 0
    streams = view["timeline"]["streams"]
    assert streams[0] == "stage0/compute"
    assert max(seg[2] for seg in view["timeline"]["segments"]) == max(expected.schedule.end_s)
    trace = client.get(view["trace_url"])
    assert trace.status_code == 200
    events = trace.json()["traceEvents"]
    assert {e["ph"] for e in events} >= {"M", "X", "C"}
    assert client.get("/trace/000000000000.json").status_code == 404


def test_catalog_health_page_and_plotly(client):
    models = client.get("/catalog/models").json()
    assert "llama-3-8b" in [m["name"] for m in models]
    assert "h100-sxm" in [g["name"] for g in client.get("/catalog/gpus").json()]
    assert "dgx-h100" in [s["name"] for s in client.get("/catalog/systems").json()]
    unknown = client.get("/catalog/chips")
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "catalog kind 'chips' is unknown; allowed: models, systems, gpus, "
                                       "training_stacks"}
    stacks = client.get("/catalog/training_stacks").json()
    assert [s["name"] for s in stacks if s["default"]] == ["megatron-core"]
    assert {"fsdp2", "deepspeed", "hugectr"} <= {s["name"] for s in stacks} and all(s["description"] for s in stacks)
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["max_body_bytes"] == 2**20
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/vendor/plotly.min.js">' in page.text
    assert client.get("/static/app.js").status_code == 200
    # The OpenAPI document has the Python API's fields; no page that needs a CDN is served.
    schema = client.get("/openapi.json").json()
    assert {"/simulate", "/search", "/sweep", "/health"} <= set(schema["paths"])
    assert "strategy" in schema["components"]["schemas"]["SimulateRequest"]["properties"]
    assert client.get("/docs").status_code == 404
    plotly = client.get("/vendor/plotly.min.js")
    assert plotly.status_code == 200 and len(plotly.content) > 1_000_000


def search_events(client, body) -> tuple[int, list[dict]]:
    with client.stream("POST", "/search", json=body) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, [response.json()]
        return 200, [json.loads(line) for line in response.iter_lines() if line.strip()]


def test_search_streams_progress_then_the_clis_result(client):
    body = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 32, "top": 2,
            "max_tp": 2, "max_pp": 1, "zero": [1], "recompute": ["none"]}
    status, events = search_events(client, body)
    assert status == 200
    assert events[0]["event"] == "started" and events[-1]["event"] == "result"
    assert {e["event"] for e in events[1:-1]} <= {"progress"}
    found = events[-1]["result"]
    frame = madmax.search(**{k: v for k, v in body.items()})
    simulated = frame[frame["simulated"]]
    assert [r["strategy"] for r in found["results"]] == list(simulated["strategy"][:2])
    assert found["results"][0]["iteration_time_s"] == pytest.approx(simulated["iteration_time_s"].iloc[0])


def test_search_bad_input_is_refused_before_streaming(client):
    status, [answer] = search_events(client, {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8})
    assert status == 400
    with pytest.raises(MadmaxError) as caught:
        madmax.search("llama-3-8b", "dgx-h100", 8)
    assert answer == {"error": str(caught.value)}
    status, [answer] = search_events(client, {"model": "llama-3-8b", "system": "dgx-h100", "prompt_len": 8,
                                              "global_batch": 8})
    assert status == 400 and answer["error"].startswith("prompt_len applies to serving searches (task=inference)")


def test_search_over_the_time_limit_is_refused(client):
    over = client.post("/search", json={"model": "llama-3-8b", "system": "dgx-h100", "global_batch": 8,
                                        "time_limit_s": 10_000})
    assert over.status_code == 400
    assert over.json() == {"error": "time_limit_s=10000 is over this server's search limit; allowed: up to 120 s"}
    # A search of every layout of a 70B model on 1,024 GPUs takes seconds: stopped at 10 ms.
    status, events = search_events(client, {"model": "llama-3-70b", "system": "dgx-h100", "num_gpus": 1024,
                                            "global_batch": 1024, "time_limit_s": 0.01})
    message = events[-1]["error"]
    assert status in (200, 400)
    assert message.startswith("the search ran past its time limit of 0.01 s; narrow it")


def test_too_many_searches_are_429(tmp_path):
    from fastapi.testclient import TestClient

    with TestClient(create_app(Settings(data_dir=tmp_path, max_searches=0))) as c:
        response = c.post("/search", json={"model": "llama-3-8b", "system": "dgx-h100", "global_batch": 8})
    assert response.status_code == 429
    assert response.json()["error"].startswith("0 searches are running")


SWEEP = """name: web-test
mode: simulate
models: llama-3-8b
systems: [p4d.24xlarge, p5.48xlarge]
num_gpus: 8
global_batches: 32
seq_lens: 2048
strategies: ["tp=2"]
train: {tokens: 1.0e9}
"""


def test_sweep_runs_in_the_background_into_the_clis_store(client):
    pytest.importorskip("pyarrow")
    started = client.post("/sweep", json={"spec": SWEEP, "workers": 1})
    assert started.status_code == 202
    job = started.json()
    status_url = job["status_url"]
    deadline = time.monotonic() + 60
    while job["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
        job = client.get(status_url).json()
    assert job["state"] == "done" and job["done"] == job["total"] == 2
    assert job["directory"].endswith("web-test-results")
    from madmax.sweep import load

    rows = load(job["directory"])
    assert sorted(rows["system"]) == ["p4d.24xlarge", "p5.48xlarge"]
    front = client.get(f"/sweep/{job['id']}/pareto?x=cost_usd&y=time_to_train_s").json()
    assert len(front["points"]) == 2
    # The faster system is also cheaper here or not: either way the frontier holds the cheapest row.
    cheapest = rows.sort_values("cost_usd").iloc[0]
    assert front["frontier"][0]["system"] == cheapest["system"]
    assert front["frontier"][0]["cost_usd"] == pytest.approx(cheapest["cost_usd"])
    for query, words in (("x=model&y=cost_usd", "objective 'model' is not a numeric column"),
                         ("x=cost_usd&y=cost_usd", "objective 'cost_usd' is named twice")):
        refused = client.get(f"/sweep/{job['id']}/pareto?{query}")
        assert refused.status_code == 400 and refused.json()["error"].startswith(words)  # were 500s


def test_bad_sweeps_are_refused_with_a_sentence(client):
    not_yaml = client.post("/sweep", json={"spec": "name: [unclosed"})
    assert not_yaml.status_code == 400
    assert not_yaml.json()["error"].startswith("spec is not valid YAML at line")
    path_like = client.post("/sweep", json={"spec": "/etc/passwd"})
    assert path_like.status_code == 400
    assert path_like.json()["error"].startswith("spec must be a sweep file's content")
    bad_name = client.post("/sweep", json={"spec": SWEEP.replace("name: web-test", "name: ../up")})
    assert bad_name.status_code == 400 and "names the results folder" in bad_name.json()["error"]
    assert client.get("/sweep/nope").json() == {"error": "sweep 'nope' is unknown to this server"}


MODELS = st.sampled_from(["llama-3-8b", "llama-2-7b", "nope", "", {"family": "decoder"}, {"hidden_size": -1}, 3])
STRATEGIES = st.one_of(st.none(), st.text(alphabet="tpdz=,0123456789", max_size=12),
                       st.sampled_from(["tp=2", "pp=2,vp=3", "tp=8,pp=4", "zero=4", "recompute=sometimes"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=MODELS, num_gpus=st.one_of(st.none(), st.integers(-2, 20), st.just("x")), strategy=STRATEGIES,
       global_batch=st.one_of(st.none(), st.integers(-1, 64)))
def test_any_body_answers_a_result_or_one_sentence(client, model, num_gpus, strategy, global_batch):
    body = {"model": model, "system": "dgx-h100", "num_gpus": num_gpus, "strategy": strategy,
            "global_batch": global_batch}
    response = client.post("/simulate", json=body)
    assert response.status_code in (200, 400, 422)
    if response.status_code != 200:
        error = response.json()["error"]
        assert error and "\n" not in error and "Traceback" not in error


def test_a_serving_search_streams_the_serving_searchs_result(client):
    body = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "task": "inference", "prompt_len": 512,
            "output_len": 64, "top": 2, "max_batch": 8, "dtypes": ["bf16"]}
    status, events = search_events(client, body)
    assert status == 200 and events[-1]["event"] == "result"
    from madmax.search.serving import find_serving, summary

    options = {k: v for k, v in body.items() if k != "task"}
    expected = summary(find_serving(**options), 2)
    found = events[-1]["result"]
    assert [r["strategy"] for r in found["results"]] == [r["strategy"] for r in expected["results"]]
    assert found["results"][0]["ttft_s"] == pytest.approx(expected["results"][0]["ttft_s"])
    wrong = client.post("/search", json={**body, "zero": [1]})
    assert wrong.status_code == 400
    assert wrong.json()["error"].startswith("zero applies to training searches; allowed here: ")


def test_a_short_simulate_is_answered_while_a_long_search_runs(live_server):
    """Searches run in processes of their own: a simulate sent while a search runs is answered at once.

    The search (every layout of a 405B model on 16,384 GPUs, about fifty times the simulate's work on any
    machine) has started streaming before the simulate is sent, and is still running when its answer comes;
    the client then hangs up, which stops it. No time limit is assumed (the old 4 s limit failed under
    load): only the order of events, which a loaded machine keeps, since it slows both alike."""
    import urllib.request

    def call(path: str, body: dict):
        return urllib.request.urlopen(urllib.request.Request(
            live_server + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}),
            timeout=300)

    long_search = {"model": "llama-3.1-405b", "system": "dgx-h100", "num_gpus": 16384, "global_batch": 2048,
                   "time_limit_s": 120}
    with call("/search", long_search) as stream:
        assert json.loads(stream.readline())["event"] == "started"
        with call("/simulate", SMALL) as answer:
            result = json.loads(answer.read())
        assert result["iteration_time_s"] > 0
        # the search has not answered yet: the next line (if one came meanwhile) is progress, not its result
        assert json.loads(stream.readline())["event"] == "progress"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=st.integers(-1, 2), max_tp=st.sampled_from([None, -1, 0, 1, 2]), zero=st.sampled_from([None, [1], [5], []]),
       recompute=st.sampled_from([None, ["none"], ["sometimes"], []]),
       objective=st.sampled_from(["throughput", "cost", "speed"]), extra=st.sampled_from([{}, {"prompt_len": 8},
                                                                                          {"tp": 2}]))
def test_any_search_body_answers_a_stream_or_one_sentence(client, top, max_tp, zero, recompute, objective, extra):
    body = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 16, "max_pp": 1, "top": top,
            "max_tp": max_tp, "zero": zero, "recompute": recompute, "objective": objective, **extra}
    status, events = search_events(client, body)
    assert status in (200, 400, 422)
    error = events[-1].get("error")
    if status != 200:
        assert error and "\n" not in error and "Traceback" not in error
    else:
        assert events[-1]["event"] in ("result", "error")
        assert "internal error" not in (error or "")


def test_a_capacity_search_streams_the_capacity_searchs_result(client):
    body = {"model": "llama-3.1-8b", "system": ["dgx-h100"], "task": "inference", "prompt_len": 512,
            "output_len": 64, "request_rate": 120, "slo": "p99_ttft=300ms,p99_tpot=15ms", "dtypes": ["fp8"],
            "kv_dtypes": ["fp8"], "max_tp": 1, "max_pp": 1, "num_requests": 200, "exact": 1, "top": 1}
    status, events = search_events(client, body)
    assert status == 200 and events[-1]["event"] == "result", events[-1]
    from madmax.search.capacity import find_capacity, summary

    options = {k: v for k, v in body.items() if k not in ("task", "model", "system")}
    expected = summary(find_capacity("llama-3.1-8b", ["dgx-h100"], **options), 1)
    found = events[-1]["result"]
    assert found["deployments"] == json.loads(json.dumps(expected["deployments"]))
    assert found["confirm"] == expected["confirm"] and found["confirm"].startswith("madmax simulate")
    for bad, sentence in (({"slo": "p95_ttft=1"}, "'p95_ttft' is unknown"),
                          ({"zero": [1]}, "zero applies to training searches; allowed here: "),
                          ({"max_batch": 8}, "max_batch applies to the serving layout search"),
                          ({"request_rate": None, "slo": None, "num_requests": None}, "system lists several systems")):
        wrong = client.post("/search", json={**body, **bad})
        assert wrong.status_code == 400 and sentence in wrong.json()["error"], wrong.json()


RL_STEP = {"model": "llama-3.2-1b", "system": "dgx-h100", "num_gpus": 8, "rl": "prompts=16,samples=8",
           "prompt_len": 128, "response_len": 256}


def test_an_rl_step_answers_simulate_rls_to_dict(client):
    response = client.post("/rl", json=RL_STEP)
    assert response.status_code == 200, response.json()
    assert response.json() == json.loads(json.dumps(madmax.simulate_rl(**RL_STEP).to_dict()))
    for bad, text in (({"rl": "prompts=0"}, "rl.prompts='0': Input should be greater than 0"),
                      ({"rl": "/etc/passwd"}, "reads files only under its data directory"),
                      ({"mode": "rate"}, "mode is not a field of the request")):
        wrong = client.post("/rl", json={**RL_STEP, **bad})
        assert wrong.status_code in (400, 422) and text in wrong.json()["error"], wrong.json()


def test_an_rl_layout_search_streams_find_rls_result(client):
    body = {**RL_STEP, "task": "rl", "rl": "prompts=16,samples=8,layout=colocated", "top": 2}
    status, events = search_events(client, body)
    assert status == 200 and events[-1]["event"] == "result", events[-1]
    from madmax.rl.search import find_rl

    options = {k: v for k, v in body.items() if k not in ("task", "top")}
    expected = find_rl(**options).to_dict(2)
    found = events[-1]["result"]
    assert found["candidates"] == 4 and [r["candidate"] for r in found["results"]] == [
        r["candidate"] for r in expected["results"]]
    assert found["results"][0]["step_time_s"] == pytest.approx(expected["results"][0]["step_time_s"], rel=1e-12)
    for bad, sentence in (({"global_batch": 8}, "global_batch does not apply to an RL layout search (task=rl)"),
                          ({"rl": "samples=4"}, "rl.prompts is required")):
        wrong = client.post("/search", json={**body, **bad})
        assert wrong.status_code == 400 and sentence in wrong.json()["error"], wrong.json()
    wrong = client.post("/search", json={"model": "llama-3.2-1b", "system": "dgx-h100", "global_batch": 8,
                                         "rl": "prompts=8"})
    assert wrong.status_code == 400 and wrong.json()["error"].startswith("rl applies to the RL layout search (task=rl)")
