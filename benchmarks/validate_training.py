"""Accuracy of the training engine against published and measured dense-model training runs.

    python benchmarks/validate_training.py [--check] [--sample N] [--jobs J] [--json out.json]
                                           [--markdown docs/training_accuracy.md]

Runs every mappable dense training row of the packaged validation datasets (Narayanan 2021,
Korthikanti 2022, NeMo, vTrain single- and multi-node) through `madmax.api.simulate`, prints the
error tables (markdown) and the targets below. With --check, exits 1 when a target is missed.

Targets (issue 11, dense training rows, each row under its software stack: Narayanan's ZeRO-3 rows under
deepspeed, the Megatron rows under megatron-lm-2021, NeMo under megatron-core, vTrain's held-out rows
under megatron-deepspeed, fitted on the other half of vTrain's shapes):
- median |error| <= 5 %, p90 |error| <= 12 %;
- Korthikanti et al. 2022 iteration times: mean |error| <= 5 %;
- no row crashes the engine (an exception other than MadmaxError).
The bias (median signed error) of each dataset is printed beside them: a median of small errors all of
one sign is a missing mechanism, not noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from madmax.validate import run_validation
from madmax.validate.datasets import LOADERS
from madmax.validate.runner import Report, RowResult
from madmax.validate.stack import SUFFIX

KORTHIKANTI_MEAN_ABS_PCT = 5.0
DENSE_MEDIAN_ABS_PCT = 5.0
DENSE_P90_ABS_PCT = 12.0
# Dense-model training datasets; vTrain's count through their held-out `+stack` re-runs only.
DENSE = ("narayanan2021", "korthikanti2022", "nemo", f"vtrain_single{SUFFIX}", f"vtrain_multi{SUFFIX}")


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    limit: float | None  # None: reported, not judged

    @property
    def met(self) -> bool:
        return self.limit is None or (self.value is not None and self.value <= self.limit)


def targets(report: Report) -> list[Target]:
    """The accuracy targets and the figures of `report` they judge."""
    def is_korthikanti_time(r: RowResult) -> bool:
        return r.case.dataset == "korthikanti2022" and r.case.metric == "iteration_time_s"

    korth = report.select(is_korthikanti_time, "korthikanti2022 iteration times")
    dense = report.select(lambda r: r.case.dataset in DENSE, "dense rows, each stack")
    stats = dense.stats
    found = [
        Target("dense rows, each stack: median |error| %", stats.median_abs_pct if stats else None,
               DENSE_MEDIAN_ABS_PCT),
        Target("dense rows, each stack: p90 |error| %", stats.p90_abs_pct if stats else None, DENSE_P90_ABS_PCT),
        Target("Korthikanti 2022 iteration times: mean |error| %",
               korth.stats.mean_abs_pct if korth.stats else None, KORTHIKANTI_MEAN_ABS_PCT),
        Target("rows that crashed the engine", float(report.overall.crashed), 0.0),
    ]
    for name in DENSE:
        one = report.select(lambda r, name=name: r.case.dataset == name, name)
        if one.stats is not None:
            found.append(Target(f"{name}: bias (median signed error) %", one.stats.median_signed_pct, None))
    return found


def target_lines(report: Report, checked: list[Target]) -> list[str]:
    """The targets section: the dense rows counted, then each target met, missed or for information."""
    dense = report.select(lambda r: r.case.dataset in DENSE, "dense rows, each stack")
    lines = ["## Targets", "", f"- dense rows, each stack: {dense.run} rows run"]
    for t in checked:
        shown = "-" if t.value is None else f"{t.value:.2f}"
        if t.limit is None:
            lines.append(f"- info   {t.name}: {shown}")
        else:
            lines.append(f"- {'met   ' if t.met else 'MISSED'} {t.name}: {shown} (limit {t.limit:g})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--sample", type=int, default=None,
                        help="at most N rows per dataset (vtrain_single has 1,440); default all")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--datasets", nargs="+", choices=list(LOADERS),
                        default=["narayanan2021", "korthikanti2022", "nemo", "vtrain_single", "vtrain_multi"])
    parser.add_argument("--json", type=Path, default=None, help="write the full report as JSON here")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="write the targets and the dense-row count here (docs/training_accuracy.md; the "
                             "README's accuracy sentence is checked against it)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    from madmax.validate.datasets import load_datasets
    from madmax.validate.stack import stack_datasets

    datasets = load_datasets(args.datasets)
    report = run_validation([*datasets, *stack_datasets(datasets)], sample=args.sample, seed=args.seed,
                            jobs=args.jobs)
    elapsed = time.perf_counter() - start
    print(report.to_markdown())
    checked = targets(report)
    lines = target_lines(report, checked)
    print("\n".join(lines))
    print(f"\n{report.overall.run} rows run in {elapsed:.1f} s")
    if args.markdown:
        args.markdown.write_text("# Training accuracy: the dense-row targets\n\nGENERATED by `python "
                                 "benchmarks/validate_training.py --jobs 8 --markdown docs/training_accuracy.md`; do "
                                 "not edit. The per-row tables are in [validation.md](validation.md).\n\n"
                                 + "\n".join(lines) + "\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=1, default=str))
    return 1 if args.check and not all(t.met for t in checked) else 0


if __name__ == "__main__":
    sys.exit(main())
