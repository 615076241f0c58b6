"""The page in a real headless Chromium: what a person sees equals what the API answers.

Skips without /usr/bin/chromium (or $MADMAX_CHROMIUM) or without playwright; `.ci/run` installs Chromium
when it can.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

GIB = 2**30
TIMEOUT_MS = 20_000
SIMULATE = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 16, "task": "pretrain", "global_batch": 64,
            "strategy": "tp=2,pp=2"}
SEARCH = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "task": "pretrain", "global_batch": 32,
          "top": 3, "max_tp": 2, "max_pp": 1}


def post(base: str, path: str, body: dict) -> bytes:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        return exc.read()


def shown(text: str, unit: str) -> float:
    """The number a cell shows, in the API's unit (the page's `format` in reverse)."""
    number, _, suffix = text.strip().partition(" ")
    value = float(number)
    if unit == "s":
        return value / 1e3 if suffix == "ms" else value
    return {"pct": value / 100, "gib": value * GIB}.get(unit, value)


def decimals_tolerance(unit: str, value: float) -> float:
    """How far a shown number may be from the API's: half its last shown digit."""
    if unit == "pct":
        return 0.5e-4
    if unit == "gib":
        return 0.005 * GIB
    return abs(value) * 5e-4  # toPrecision(4 or 5)


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    yield p
    context.close()
    assert not errors, f"the page raised: {errors}"


def open_page(page, base: str, state: dict, run: str | None = None) -> None:
    query = {**state, **({"run": run} if run else {})}
    page.goto(f"{base}/#{urllib.parse.urlencode(query)}")
    page.wait_for_selector("body[data-ready='1']", timeout=TIMEOUT_MS)


def test_simulate_shows_the_apis_numbers_and_draws_the_plots(page, live_server):
    open_page(page, live_server, SIMULATE, run="simulate")
    page.wait_for_selector("#timeline-plot .main-svg", timeout=TIMEOUT_MS)
    expected = json.loads(post(live_server, "/simulate", SIMULATE))
    rows = page.eval_on_selector_all("#result-table tr", "rows => rows.map(r => [r.dataset.key, r.dataset.unit, "
                                                         "r.cells[1].textContent])")
    assert [key for key, *_ in rows][:4] == ["model", "system", "num_gpus", "strategy"]
    for key, unit, text in rows:
        if unit in ("text", "int"):
            assert text == str(expected[key]), key
        elif unit == "bool":
            assert text == ("yes" if expected[key] else "no")
        else:
            assert shown(text, unit) == pytest.approx(expected[key], abs=decimals_tolerance(unit, expected[key])), key
    # The breakdown has a bar segment per part, the memory plot a bar per stage part, the timeline a line
    # per category of kernel.
    assert page.locator("#breakdown-plot .trace.bars").count() >= 5
    assert page.locator("#memory-plot .trace.bars").count() == 2
    assert page.locator("#timeline-plot .scatterlayer .trace").count() >= 4
    assert page.get_attribute("#trace-link", "href").startswith("/trace/")
    # The state is in the URL: the same link reopens the same view.
    assert "strategy=tp%3D2%2Cpp%3D2" in page.url and "run=simulate" in page.url


def test_a_price_and_power_show_the_apis_cost(page, live_server):
    # issue 29: the page takes --price and --power like the CLI; the cost rows are the API's `cost` block
    state = {**SIMULATE, "price": 2.5, "power": 1000}
    open_page(page, live_server, state, run="simulate")
    page.wait_for_selector("#result-table tr[data-cost='1']", timeout=TIMEOUT_MS)
    cost = json.loads(post(live_server, "/simulate", state))["cost"]
    rows = page.eval_on_selector_all("#result-table tr[data-cost='1']",
                                     "rows => rows.map(r => [r.dataset.key, r.cells[1].textContent])")
    assert {key for key, _ in rows} == set(cost) - {"power_basis"}
    assert cost["price_per_gpu_hour_usd"] == 2.5 and cost["usd_per_hour"] == 2.5 * 16
    for key, text in rows:
        assert float(text) == pytest.approx(cost[key], rel=5e-4), key


@pytest.mark.parametrize("reliability", ["", "ideal"])
def test_tokens_to_train_show_the_apis_time_to_train(page, live_server, reliability):
    # issue 30: the page takes the tokens to train and the reliability profile; the rows are the API's block
    state = {**SIMULATE, "tokens": 1e12, **({"reliability": reliability} if reliability else {})}
    open_page(page, live_server, state, run="simulate")
    page.wait_for_selector("#result-table tr[data-train='1']", timeout=TIMEOUT_MS)
    block = json.loads(post(live_server, "/simulate", state))["time_to_train"]
    rows = page.eval_on_selector_all("#result-table tr[data-train='1']", "rows => rows.map(r => "
                                     "[r.dataset.key, r.dataset.unit, r.cells[1].textContent])")
    assert [key for key, *_ in rows][:2] == ["wall_s", "goodput"]
    for key, unit, text in rows:
        if block[key] is None:
            assert text == "-", key
            continue
        number, _, suffix = text.partition(" ")
        scale = {"days": 86400, "h": 3600, "min": 60}.get(suffix, 1) if unit == "duration" else 1
        value = float(number) * scale / (100 if unit == "pct" else 1)
        assert value == pytest.approx(block[key], rel=5e-4, abs=0.5e-4 if unit == "pct" else 0), key
    assert (block["goodput"] == 1.0) == (reliability == "ideal")


def test_search_shows_the_apis_top_strategies(page, live_server):
    open_page(page, live_server, SEARCH)
    page.click("#search-btn")
    page.wait_for_selector("#search-table tbody tr", timeout=TIMEOUT_MS)
    lines = [json.loads(line) for line in post(live_server, "/search", SEARCH).splitlines() if line.strip()]
    expected = lines[-1]["result"]["results"]
    strategies = page.eval_on_selector_all("#search-table tbody td[data-key='strategy']",
                                           "cells => cells.map(c => c.textContent)")
    assert strategies == [r["strategy"] for r in expected]
    times = page.eval_on_selector_all("#search-table tbody td[data-key='iteration_time_s']",
                                      "cells => cells.map(c => c.textContent)")
    for text, r in zip(times, expected, strict=True):
        assert shown(text, "s") == pytest.approx(r["iteration_time_s"], rel=5e-4)
    assert page.locator("#search-plot .trace.bars").count() == 1
    assert "run=search" in page.url


def test_a_training_stack_reaches_the_api(page, live_server):
    # issue 26: the page's training stack select (GET /catalog/training_stacks) is the request's `stack`, for a
    # simulation and a search alike; the serving engines' select stays hidden.
    state = {**SEARCH, "training_stack": "fsdp2"}
    open_page(page, live_server, state)
    assert page.eval_on_selector("#training_stack", "s => s.options[0].value") == ""  # megatron-core, the default
    page.click("#search-btn")
    page.wait_for_selector("#search-table tbody tr", timeout=TIMEOUT_MS)
    body = {**SEARCH, "stack": "fsdp2"}
    lines = [json.loads(line) for line in post(live_server, "/search", body).splitlines() if line.strip()]
    expected = lines[-1]["result"]
    assert expected["stack"] == "fsdp2"
    times = page.eval_on_selector_all("#search-table tbody td[data-key='iteration_time_s']",
                                      "cells => cells.map(c => c.textContent)")
    for text, r in zip(times, expected["results"], strict=True):
        assert shown(text, "s") == pytest.approx(r["iteration_time_s"], rel=5e-4)
    default = [json.loads(line) for line in post(live_server, "/search", SEARCH).splitlines() if line.strip()]
    assert default[-1]["result"]["results"][0]["iteration_time_s"] != expected["results"][0]["iteration_time_s"]


def test_a_training_stack_reaches_a_simulation(page, live_server):
    open_page(page, live_server, {**SIMULATE, "training_stack": "fsdp2"}, run="simulate")
    page.wait_for_selector("#result-table tr[data-key='iteration_time_s']", timeout=TIMEOUT_MS)
    fsdp2 = json.loads(post(live_server, "/simulate", {**SIMULATE, "stack": "fsdp2"}))
    core = json.loads(post(live_server, "/simulate", SIMULATE))
    assert fsdp2["iteration_time_s"] != core["iteration_time_s"]
    text = page.eval_on_selector("#result-table tr[data-key='iteration_time_s']", "r => r.cells[1].textContent")
    assert shown(text, "s") == pytest.approx(fsdp2["iteration_time_s"], rel=5e-4)


def test_a_bad_strategy_shows_the_apis_sentence(page, live_server):
    open_page(page, live_server, {**SIMULATE, "strategy": "tp=3"})
    page.click("#simulate-btn")
    page.wait_for_selector("#error:not([hidden])", timeout=TIMEOUT_MS)
    expected = json.loads(post(live_server, "/simulate", {**SIMULATE, "strategy": "tp=3"}))["error"]
    assert page.inner_text("#error") == expected
    assert expected.startswith("tp*pp*cp=3*1*1=3 does not divide num_gpus=16")


HF_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
             "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 8192, "hidden_act": "silu", "rms_norm_eps": 1e-5,
             "tie_word_embeddings": True}


def test_an_uploaded_config_is_simulated_and_an_oversized_one_refused(page, live_server):
    state = {"system": "dgx-h100", "num_gpus": 8, "task": "pretrain", "global_batch": 32}
    open_page(page, live_server, state)
    page.set_input_files("#model-file", files=[{"name": "config.json", "mimeType": "application/json",
                                                "buffer": json.dumps(HF_CONFIG).encode()}])
    page.wait_for_function("document.getElementById('model').value === '__upload__'", timeout=TIMEOUT_MS)
    page.click("#simulate-btn")
    page.wait_for_selector("#result-table tr", timeout=TIMEOUT_MS)
    expected = json.loads(post(live_server, "/simulate", {**state, "model": HF_CONFIG}))
    cell = page.inner_text("#result-table tr[data-key='iteration_time_s'] td")
    assert shown(cell, "s") == pytest.approx(expected["iteration_time_s"], rel=5e-4)
    assert "model=" not in page.url  # an upload does not fit in a URL
    page.set_input_files("#model-file", files=[{"name": "big.json", "mimeType": "application/json",
                                                "buffer": b" " * (2**20 + 1)}])
    page.wait_for_selector("#error:not([hidden])", timeout=TIMEOUT_MS)
    assert page.inner_text("#error") == ("big.json is 1,048,577 bytes; allowed: up to 1 MB (a model's config.json "
                                         "is a few kB)")


CAPACITY = {"model": "llama-3.1-8b", "system": "dgx-h100", "task": "inference", "prompt_len": 512, "output_len": 64,
            "request_rate": 120, "slo": "p99_ttft=300ms,p99_tpot=15ms", "dtype": "fp8", "kv_dtype": "fp8", "top": 2,
            "max_tp": 1, "max_pp": 1}


def test_a_capacity_search_shows_the_apis_deployments(page, live_server):
    # issue 27: with a request rate the page's search is the capacity search; its rows are the API's deployments
    open_page(page, live_server, CAPACITY)
    page.click("#search-btn")
    page.wait_for_selector("#search-table tbody tr", timeout=120_000)
    body = {**{k: v for k, v in CAPACITY.items() if k not in ("dtype", "kv_dtype")}, "dtypes": ["fp8"],
            "kv_dtypes": ["fp8"], "objective": "throughput"}
    lines = [json.loads(line) for line in post(live_server, "/search", body).splitlines() if line.strip()]
    expected = lines[-1]["result"]["deployments"]
    cells = page.eval_on_selector_all("#search-table tbody tr", "rows => rows.map(r => Object.fromEntries([..."
                                      "r.querySelectorAll('td[data-key]')].map(c => [c.dataset.key, c.textContent])))")
    assert [(c["replica"], int(c["replicas"]), int(c["num_gpus"])) for c in cells] == [
        (d["replica"], d["replicas"], d["num_gpus"]) for d in expected]
    for c, d in zip(cells, expected, strict=True):
        assert shown(c["p99_ttft_s"], "s") == pytest.approx(d["p99_ttft_s"], rel=5e-4)
    assert "madmax simulate" in page.text_content("#search-summary")


def test_a_capacity_search_plans_disaggregated_workers_when_asked(page, live_server):
    # issue 27: the page's deployments select reaches the capacity search; its rows name the workers
    state = {**CAPACITY, "request_rate": 60, "deployments": "disaggregated", "max_tp": 2}
    open_page(page, live_server, state)
    page.click("#search-btn")
    page.wait_for_selector("#search-table tbody tr", timeout=120_000)
    body = {**{k: v for k, v in state.items() if k not in ("dtype", "kv_dtype")}, "dtypes": ["fp8"],
            "kv_dtypes": ["fp8"], "objective": "throughput"}
    lines = [json.loads(line) for line in post(live_server, "/search", body).splitlines() if line.strip()]
    expected = lines[-1]["result"]["deployments"]
    replicas = page.eval_on_selector_all("#search-table tbody tr td[data-key='replica']", "cells => cells.map("
                                         "c => c.textContent)")
    assert replicas == [d["replica"] for d in expected] and all(r.startswith("P") and "+D" in r for r in replicas)
    assert "--mode disaggregated" in page.text_content("#search-summary")


def test_a_rate_simulation_within_slos_shows_the_highest_rate(page, live_server):
    state = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 1, "task": "inference", "prompt_len": 512,
             "output_len": 64, "mode": "rate", "dtype": "fp8", "slo": "p99_ttft=300ms,p99_tpot=15ms",
             "strategy": "tp=1"}
    open_page(page, live_server, state, run="simulate")
    page.wait_for_selector("#result-table tr[data-key='highest_rate']", timeout=120_000)
    result = json.loads(post(live_server, "/simulate", state))
    text = page.text_content("#result-table tr[data-key='highest_rate'] td")
    assert float(text.split()[0]) == pytest.approx(result["slo"]["highest_rate"], rel=5e-4)
    assert page.locator("#result-table tr[data-key='slo_p99_tpot']").count() == 1


def test_a_draft_model_reaches_the_api(page, live_server):
    # issue 27: speculative decoding with a draft model, chosen on the page
    state = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 1, "task": "inference", "prompt_len": 512,
             "output_len": 64, "batch": 4, "strategy": "tp=1", "speculative": "draft", "draft_model": "llama-3.2-1b",
             "draft_len": 3, "acceptance": 0.6, "stack": "vllm"}
    open_page(page, live_server, state, run="simulate")
    page.wait_for_selector("#result-table tr[data-key='tpot_s']", timeout=TIMEOUT_MS)
    result = json.loads(post(live_server, "/simulate", state))
    assert shown(page.text_content("#result-table tr[data-key='tpot_s'] td"), "s") == pytest.approx(
        result["tpot_s"], rel=5e-4)
    notes = page.eval_on_selector_all("#assumptions li", "items => items.map(i => i.textContent)")
    assert any("by the draft model llama-3.2-1b" in n for n in notes)
    assert '"model":"meta-llama/Llama-3.2-1B"' in page.text_content("#launch-body pre.launch-command")


def test_speculative_decoding_and_a_shared_prefix_reach_the_api(page, live_server):
    state = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 1, "task": "inference", "prompt_len": 1024,
             "output_len": 64, "batch": 4, "strategy": "tp=1", "speculative": "eagle", "draft_len": 3,
             "acceptance": 0.6, "prefix_len": 512}
    open_page(page, live_server, state, run="simulate")
    page.wait_for_selector("#result-table tr[data-key='tpot_s']", timeout=TIMEOUT_MS)
    result = json.loads(post(live_server, "/simulate", state))
    text = page.text_content("#result-table tr[data-key='tpot_s'] td")
    assert shown(text, "s") == pytest.approx(result["tpot_s"], rel=5e-4)
    notes = page.eval_on_selector_all("#assumptions li", "items => items.map(i => i.textContent)")
    assert any(n.startswith("speculative decoding: 3 token(s)") for n in notes)
    assert any(n.startswith("prefix caching: every prompt starts with the same 512 tokens") for n in notes)
    # the launch command of the API's result, as text
    (launch,) = result["launch"]
    assert page.text_content("#launch-body pre.launch-command") == launch["command"]
    config = page.text_content("#launch-body pre.launch-config")
    assert config == f"# {launch['config_name']}\n{launch['config']}"
    assert "speculative_config: {decoding_type: Eagle, max_draft_len: 3" in config
