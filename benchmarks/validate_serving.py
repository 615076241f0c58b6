"""Accuracy of the serving engine against measured serving runs: TTFT and TPOT by stack, mode and model.

    python benchmarks/validate_serving.py [--check] [--sample N] [--jobs J]

Runs the mappable rows of `serving_h100` (TensorRT-LLM, vLLM and SGLang on H100, aggregated and
disaggregated; each row under its engine version's stack profile and its launch) and `trtllm_static`
(TensorRT-LLM v0.9 static batching) through `madmax.api.simulate`, and prints, per metric: the median and
p90 of |error|, the signed bias and the rows beyond 2x and 4x, by stack and mode and by model, issue 24's
dev targets met or missed, and AIConfigurator's errors on the same rows where its predictions are in the
package (`benchmarks/aiconfigurator_serving.py`). With --check, exits 1 when a target is missed.
`madmax validate --markdown docs/validation.md` writes the same tables into the validation page.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from madmax.validate import run_validation
from madmax.validate.serving_report import Errors, serving_markdown, serving_rows, target_checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 when a dev target is missed.")
    parser.add_argument("--sample", type=int, default=None, help="At most N rows per dataset (a quick look).")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    start = time.perf_counter()
    report = run_validation(["serving_h100", "trtllm_static"], sample=args.sample, jobs=args.jobs)
    rows = [r for r in report.rows if r.case.dataset == "serving_h100"]
    print("\n".join(serving_markdown(rows)))
    static = [r for r in report.rows if r.case.dataset == "trtllm_static" and r.predicted is not None]
    e = Errors.of([r.predicted for r in static], [r.case.measured for r in static])
    if e is not None:
        print(f"trtllm_static: {e.rows} rows, median {e.median:.1f}%, p90 {e.p90:.1f}%, bias {e.bias:+.1f}%")
    print(f"{len(report.rows)} cases in {time.perf_counter() - start:.0f} s")
    missed = [f"{name} {text}" for name, text, ok in target_checks(serving_rows(rows)) if not ok]
    if args.check and missed:
        print(f"missed: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
