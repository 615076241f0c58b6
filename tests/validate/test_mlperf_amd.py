"""MLPerf Training v5.0 LoRA rows on AMD Instinct GPUs: each row maps to the submission's layout."""

from madmax.validate.datasets import LOADERS, load_mlperf_amd


def test_every_row_maps_to_its_submission():
    ds = load_mlperf_amd()
    assert len(ds.cases) == 6 and not ds.unmapped and "mlperf_amd" in LOADERS
    mi300x, mi325x = ds.cases[0], ds.cases[1]
    # AMD MI300X: 10 runs, per-run medians 2.023 .. 2.0291 samples/s; the two middle ones 2.0273 and 2.0274
    assert mi300x.measured == 2.02735 and mi300x.metric == "samples_per_s" and mi300x.gpu == "mi300x"
    k = mi300x.kwargs
    assert (k["system"], k["num_gpus"], k["global_batch"], k["seq_len"], k["dtype"]) == ("amd-mi300x-8", 8, 8, 8192,
                                                                                        "fp8")
    assert k["strategy"] == "tp=1,pp=1,cp=1,dp=8,mbs=1,zero=1,recompute=full,recompute_layers=21,fp8_params=1"
    assert k["task"] == {"kind": "finetune", "finetune": "lora", "lora_rank": 16, "lora_targets": ["qkv", "out"]}
    assert k["model"]["max_seq_len"] == 8192 and k["model"]["num_layers"] == 80
    # MI325X (256 GB): no activation checkpointing
    assert "recompute=none" in mi325x.kwargs["strategy"] and mi325x.kwargs["system"] == "amd-mi325x-8"
    # MangoBoost on 4 nodes: context parallelism 4, data parallelism 8
    assert ds.cases[5].kwargs["num_gpus"] == 32 and "cp=4,dp=8" in ds.cases[5].kwargs["strategy"]
    assert ds.cases[5].parallelism == "cp+dp"
