"""Random and adversarial inference requests: a result or the project's error with one sentence, never another
exception; and the top-level API (`madmax.simulate`, `madmax.search`) is the same as `madmax.api`."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import madmax
from madmax.errors import MadmaxError

values = st.one_of(st.none(), st.integers(-3, 5000), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from(["8", "", "x", [1], {"a": 1}]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=values, prompt=values, output=values,
       mode=st.sampled_from([None, "static", "concurrency", "saturation", "rate", "disaggregated", "burst", 3]),
       rate=values, requests=st.one_of(st.none(), st.integers(-2, 60)), dtype=st.sampled_from(
           [None, "bf16", "fp8", "fp4", "int4", "nvfp4", "fp32", "tf32", "int8", "FP8", "mxfp4", "awq", "w8a8",
            "int3"]),
       kv=st.sampled_from([None, "fp8", "bf16", "fp4"]),
       stack=st.sampled_from([None, "trtllm", "vllm", "vllm-0.14", "sglang", "trtllm-0.9", "tgi", {}]),
       launch=st.sampled_from([None, "engine", "sized", "aiconfigurator", "fast", 1]),
       engine=st.sampled_from([None, "max_num_tokens=4096", "chunked_prefill=0", "mixed_batches=0",
                               "max_batch=2", "frontend_s=0", "host_overlaps_gpu=0", "foo=1", "max_num_tokens=-1",
                               ",", "==", "max_batch=1,max_batch=2"]),
       strategy=st.sampled_from([None, "tp=2", "tp=8", "tp=3", "pp=2", "tp=2,pp=2", "zero=1", "dp=3",
                                 "prefill_workers=1,decode_workers=1",
                                 "prefill_workers=4,decode_workers=1,decode_tp=4"]))
def test_inference_requests_end_in_a_result_or_one_sentence(batch, prompt, output, mode, rate, requests, dtype, kv,
                                                           stack, launch, engine, strategy):
    try:
        r = madmax.simulate("llama-3.1-8b", "dgx-h100", 8, task="inference", batch=batch, prompt_len=prompt,
                            output_len=output, mode=mode, request_rate=rate, num_requests=requests, dtype=dtype,
                            kv_dtype=kv, stack=stack, launch=launch, engine=engine, strategy=strategy)
    except MadmaxError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message
        return
    d = r.to_dict()
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s", "peak_memory_bytes", "decode_step_time_s"):
        assert isinstance(d[key], float) and math.isfinite(d[key]) and d[key] >= 0, key
    assert d["fits"] or d["fits_reason"]
    assert all(isinstance(s, str) and s and "\n" not in s for s in d["limits"])


def test_top_level_api_is_the_api():
    from madmax import api

    assert madmax.simulate is api.simulate and madmax.inspect is api.inspect
    assert callable(madmax.search) and madmax.search.search.__module__ == "madmax.search.api"


def test_arrivals_csv_bad_and_good(tmp_path):
    import pytest

    def run(text: str):
        path = tmp_path / "arrivals.csv"
        path.write_text(text)
        return madmax.simulate("llama-3.1-8b", "dgx-h100", 8, task="inference", mode="rate", arrivals=path,
                               strategy="tp=2")

    for text, words in [("", "has no requests"), ("arrival_s,prompt_len,output_len\n", "has no requests"),
                        ("arrival_s,prompt_len,output_len\n0,nan,5\n", "out of range"),
                        ("arrival_s,prompt_len,output_len\n-1,10,5\n", "out of range"),
                        ("arrival_s,prompt_len,output_len\n0,10.5,5\n", "out of range"),
                        ("arrival_s,prompt_len,output_len\n0,ten,5\n", "is not a number"),
                        ("arrival_s,prompt_len\n0,10\n", "output_len=''"),
                        ("arrival_s,prompt_len,output_len\n0,131000,1000\n", "exceeds max_seq_len"),
                        # beyond ~32 years the float clock loses the microsecond: refused, not hung
                        ("arrival_s,prompt_len,output_len\n0,10,5\n1e300,10,5\n", "out of range")]:
        with pytest.raises(MadmaxError, match=words):
            run(text)
    # Three requests, the trace's order by arrival; the first arrives at t = 0 after the shift.
    r = run("arrival_s,prompt_len,output_len\n5.0,100,10\n3.0,200,20\n3.5,50,5\n")
    assert r.mode == "rate" and r.requests_per_s > 0 and math.isfinite(r.ttft_s)


def test_a_vanishing_request_rate_is_refused_not_simulated_forever():
    import pytest

    # 6e-228 requests/s puts arrivals near 1e228 s, where a step added to the clock vanishes (a hang).
    with pytest.raises(MadmaxError, match="request_rate"):
        madmax.simulate("llama-3.1-8b", "dgx-h100", 1, task="inference", mode="rate", request_rate=6e-228,
                        num_requests=10, prompt_len=100, output_len=10)
