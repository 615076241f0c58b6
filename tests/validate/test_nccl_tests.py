"""The nccl-tests reader and the alpha-beta fit, on two outputs written by hand in nccl-tests' layout.

data/all_reduce_perf.txt: newer nccl-tests (a '# Collective test starting' line, redop/root columns),
one DGX A100 node, 8 ranks. Its out-of-place times follow t = 2(n-1) alpha + 2(n-1)/n S / B with
alpha = 2.5 us and B = 230 GB/s (about the A100 NVLink busbw of NVIDIA/nccl-tests#149), e.g.
S = 1 GiB: 14 * 2.5e-6 + 1.75 * 2**30 / 230e9 = 3.5e-5 + 8.1697e-3 s = 8204.8 us, algbw 2**30 / t =
130.87 GB/s, busbw 1.75 * 130.87 = 229.02 GB/s (the row's printed values).

data/all_gather_perf.txt: older nccl-tests (no collective line, no redop/root columns, rank lines without
'Group'), 16 ranks on 2 hosts; t = (n-1) alpha + (n-1)/n S / B with alpha = 4 us and B = 20 GB/s.
"""

from pathlib import Path

import pytest

from madmax.errors import ConfigError
from madmax.hardware.collectives import Collective
from madmax.validate.nccl_tests import collective_of, fit_run, looks_like_nccl_tests, parse_nccl_tests, read_nccl_tests

DATA = Path(__file__).parent / "data"


def test_reads_the_all_reduce_table():
    (run,) = read_nccl_tests(DATA / "all_reduce_perf.txt")
    assert run.collective == Collective.ALL_REDUCE and run.num_gpus == 8 and run.num_nodes == 1
    assert run.device == "NVIDIA A100-SXM4-80GB" and len(run.rows) == 11  # 1 MiB .. 1 GiB, doubling
    last = run.rows[-1]
    # out-of-place columns, not the in-place ones (8237.6 us)
    assert last.size_bytes == 2**30 and last.time_s == pytest.approx(8204.8e-6)
    assert last.algbw_bytes_per_s == pytest.approx(130.87e9) and last.busbw_bytes_per_s == pytest.approx(229.02e9)


def test_fit_recovers_alpha_and_busbw():
    fit = fit_run(read_nccl_tests(DATA / "all_reduce_perf.txt")[0])
    # the times are printed to 0.1 us, so the fit is exact to about 1e-3
    assert fit["step_latency_s"] == pytest.approx(2.5e-6, rel=1e-2)
    assert fit["busbw_bytes_per_s"] == pytest.approx(230e9, rel=1e-3)
    assert fit["fit_errors"]["in_sample"]["max"] < 1e-3 and fit["fit_errors"]["held_out"]["count"] == 11


def test_older_all_gather_output_named_by_its_file():
    (run,) = read_nccl_tests(DATA / "all_gather_perf.txt")
    assert run.collective == Collective.ALL_GATHER and run.num_gpus == 16 and run.num_nodes == 2
    # 512 MiB row: 15 * 4e-6 + 15/16 * 2**29 / 20e9 = 6.0e-5 + 2.51658e-2 s = 25225.8 us
    assert run.rows[-1].time_s == pytest.approx(25225.8e-6)
    fit = fit_run(run)
    assert fit["step_latency_s"] == pytest.approx(4e-6, rel=1e-2)
    assert fit["busbw_bytes_per_s"] == pytest.approx(20e9, rel=1e-3)


def test_several_tests_in_one_file():
    text = (DATA / "all_reduce_perf.txt").read_text()
    both = text + text.replace("all_reduce_perf", "alltoall_perf")
    runs = parse_nccl_tests(both, "mixed.txt")
    assert [r.collective for r in runs] == [Collective.ALL_REDUCE, Collective.ALL_TO_ALL]


@pytest.mark.parametrize(("name", "collective"), [
    ("all_reduce_perf", Collective.ALL_REDUCE), ("reduce_scatter_perf.log", Collective.REDUCE_SCATTER),
    ("alltoall_perf", Collective.ALL_TO_ALL), ("sendrecv_perf", Collective.SEND_RECV), ("run1.txt", None),
])
def test_collective_of(name, collective):
    assert collective_of(name) == collective


def test_errors_name_the_file():
    text = (DATA / "all_gather_perf.txt").read_text()
    with pytest.raises(ConfigError, match="names no collective"):
        parse_nccl_tests(text, "run1.txt")
    with pytest.raises(ConfigError, match="not a modelled collective"):
        parse_nccl_tests(text, "broadcast_perf.txt")
    with pytest.raises(ConfigError, match="no nccl-tests result rows"):
        parse_nccl_tests("# nThread 1 nGpus 8\n", "all_reduce_perf.txt")
    one_rank = "\n".join(line for line in text.splitlines() if "Rank" not in line).replace("nGpus 1", "nGpus 1")
    with pytest.raises(ConfigError, match="1 rank"):
        parse_nccl_tests(one_rank, "all_gather_perf.txt")
    assert looks_like_nccl_tests(text) and not looks_like_nccl_tests("a,b\n1,2\n")


def test_real_dgx_h100_output_fits_as_the_shipped_csv():
    # data/all_reduce_perf_dgx_h100.txt: the ten published DGX H100 rows that the shipped
    # calibration/nccl_dgx_h100_all_reduce.csv holds, in nccl-tests' layout. Both fits are least squares
    # in ln t: alpha 2.10 us, B 433.8 GB/s, time error median 9.2 %, max 23 % (calibration.py docstring).
    from madmax.hardware.calibration import fit_busbw, load_nccl_rows

    fit = fit_run(read_nccl_tests(DATA / "all_reduce_perf_dgx_h100.txt")[0])
    shipped = fit_busbw(load_nccl_rows())
    assert fit["device"] == "NVIDIA H100 80GB HBM3" and fit["max_size_bytes"] == 2**34
    assert fit["step_latency_s"] == pytest.approx(shipped["step_latency_s"], rel=1e-2)
    assert fit["busbw_bytes_per_s"] == pytest.approx(shipped["busbw_bytes_per_s"], rel=1e-3)
    assert fit["fit_errors"]["in_sample"]["median"] == pytest.approx(shipped["median"], abs=1e-3)
