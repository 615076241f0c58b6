"""`madmax bench gpu` and `madmax bench comm` on a CPU (tiny sizes, 2 gloo processes); skipped without torch.

They check the formats, not the numbers: a CPU is no GPU, and its timings only exercise the pipeline
bench -> file -> `madmax calibrate`.
"""

from __future__ import annotations

import builtins
import json

import pytest
from typer.testing import CliRunner

from madmax.cli import app
from madmax.hardware.calibration import load_records
from madmax.hardware.profile import load_profile

runner = CliRunner()


def test_missing_torch_exits_2(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    for args in (["bench", "gpu", "--out", str(tmp_path / "k.jsonl")], ["bench", "comm", "--out", str(tmp_path / "c")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "needs PyTorch" in result.output, result.output


def test_kernel_rows_have_the_shipped_fields(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "kernels.jsonl"
    result = runner.invoke(app, ["bench", "gpu", "--device", "cpu", "--repeats", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["kind"] == "env" and rows[0]["device"] == "cpu"
    shipped: dict[str, set] = {}
    for r in load_records():  # the fields every shipped row of a kind has ('bytes': the bf16 GEMMs only)
        shipped[r["kind"]] = shipped.get(r["kind"], set(r)) & set(r)
    for row in rows[1:]:
        assert shipped[row["kind"]] <= set(row), row["kind"]
        assert all(v > 0 for k, v in row.items() if k.endswith("_s"))
    kinds = [r["kind"] for r in rows]
    # tiny plan: 12 shapes x (bf16, fp32), 4 attention lengths, 4 decode rows, one copy and one read
    assert kinds.count("gemm") == 24 and kinds.count("attention") == 4 and kinds.count("decode_attention") == 4
    # calibrate reads it (a CPU has no datasheet peaks: name a catalog GPU to take fractions of)
    profile_path = tmp_path / "cpu.yaml"
    result = runner.invoke(app, ["calibrate", str(out), "--gpu", "h200", "--no-held-out", "--out", str(profile_path)])
    assert result.exit_code == 0, result.output
    assert load_profile(profile_path).device.startswith("cpu")
    result = runner.invoke(app, ["calibrate", str(out), "--out", str(profile_path)])
    assert result.exit_code == 2 and "pass --gpu" in result.output


def test_comm_on_two_gloo_processes(tmp_path):
    pytest.importorskip("torch")
    from madmax.validate.nccl_tests import read_nccl_tests

    out = tmp_path / "comm.txt"
    result = runner.invoke(app, ["bench", "comm", "--backend", "gloo", "--nprocs", "2", "--min-bytes", "4096",
                                 "--max-bytes", "32768", "--iters", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    runs = read_nccl_tests(out)
    assert [str(r.collective) for r in runs] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                "send_recv"]
    for run in runs:
        assert run.num_gpus == 2 and run.num_nodes == 1 and len(run.rows) == 4  # 4, 8, 16, 32 KiB
        for row in run.rows:
            # busbw = algbw * 2(n-1)/n = algbw for all_reduce on 2 ranks; (n-1)/n = 1/2 for the gathers
            factor = {"all_reduce": 1, "send_recv": 1}.get(str(run.collective), 0.5)
            assert row.busbw_bytes_per_s == pytest.approx(factor * row.algbw_bytes_per_s, rel=0.02, abs=1e7)
    profile_path = tmp_path / "net.yaml"
    result = runner.invoke(app, ["calibrate", str(out), "--out", str(profile_path)])
    assert result.exit_code == 0, result.output
    assert len(load_profile(profile_path).network) == 5


def test_comm_bad_options_exit_2(tmp_path):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["bench", "comm", "--backend", "mpi", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "allowed: nccl, gloo" in result.output
    result = runner.invoke(app, ["bench", "comm", "--backend", "gloo", "--collectives", "broadcast",
                                 "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "broadcast" in result.output


