"""Score the goodput model (madmax.results.goodput) on published fleet figures and write docs/goodput.md's table.

    python benchmarks/goodput.py                       # print the tables
    python benchmarks/goodput.py --markdown docs/goodput.md   # rewrite the section between the markers

Figures and their sources: benchmarks/data/fleet_reliability.yaml. Rows marked in-sample are where the default
reliability profile's rates come from: they check the arithmetic, not the model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from madmax.api import simulate
from madmax.config.reliability import load_reliability
from madmax.results.goodput import failure_rates

DATA = Path(__file__).parent / "data" / "fleet_reliability.yaml"
MARKERS = ("<!-- goodput:start -->", "<!-- goodput:end -->")


def _ratio(predicted: float, measured: float) -> str:
    return f"{predicted / measured:.2f}x"


def tables() -> str:
    """The validation tables in Markdown."""
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    profile = load_reliability(None)
    out = [f"Reliability profile: `{profile.name}` (catalog/reliability.yaml). Regenerate with "
           "`python benchmarks/goodput.py --markdown docs/goodput.md`.", "",
           "**Interruptions** (expected count over the stated exposure, components as named)", "",
           "| fleet | GPUs | days | components | measured | predicted | predicted / measured | note |",
           "|---|---|---|---|---|---|---|---|"]
    for row in data["interruptions"]:
        nodes = -(-row["gpus"] // row["gpus_per_node"])
        rates = failure_rates(profile, row["gpus"], nodes)
        predicted = sum(rates[c] for c in row["components"]) * row["hours"] * 3600
        note = "in-sample: the profile's rates come from this figure" if row["in_sample"] else "independent"
        out.append(f"| {row['name']} | {row['gpus']:,} | {row['hours'] / 24:g} | {', '.join(row['components'])} | "
                   f"{row['measured']:,} | {predicted:,.1f} | {_ratio(predicted, row['measured'])} | {note} |")
    out += ["", "**Mean time between failures of a job** (Meta's A100 research clusters)", "",
            "| GPUs | measured | predicted | predicted / measured |", "|---|---|---|---|"]
    for row in data["mtbf"]:
        nodes = -(-row["gpus"] // row["gpus_per_node"])
        planned = {f.component for f in profile.failures if f.planned}  # failures only: planned stops are not
        mtbf_h = 1 / sum(r for c, r in failure_rates(profile, row["gpus"], nodes).items() if c not in planned) / 3600
        out.append(f"| {row['gpus']:,} | {row['measured_h']:,g} h | {mtbf_h:,.1f} h | "
                   f"{_ratio(mtbf_h, row['measured_h'])} |")
    out += ["", "**Effective training time ratio** (time spent training / wall clock)", "",
            "| run | measured | predicted | goodput | checkpoint interval | restarts share |",
            "|---|---|---|---|---|---|"]
    for row in data["ettr"]:
        t = _run(row).time_to_train
        bound = "> " if row["bound"] == "lower" else ""
        out.append(f"| {row['name']} | {bound}{row['measured']:.0%} | {t['effective_training_time_ratio']:.1%} | "
                   f"{t['goodput']:.1%} | {t['checkpoint_interval_s'] / 60:.1f} min | "
                   f"{t['breakdown_s']['restarts'] / t['wall_s']:.1%} |")
    out += ["", "**GPU-hours of the whole pre-training** (Llama 3.1 model card)", "",
            "| model | measured | predicted | error | ideal (no failures) | MFU | assumed |",
            "|---|---|---|---|---|---|---|"]
    for row in data["gpu_hours"]:
        r = _run(row)
        t = r.time_to_train
        measured = float(row["measured"])
        error = 100 * (t["gpu_hours"] - measured) / measured
        out.append(f"| {row['model']} | {measured / 1e6:.2f} M | {t['gpu_hours'] / 1e6:.2f} M | {error:+.0f}% | "
                   f"{t['ideal_gpu_hours'] / 1e6:.2f} M | {r.mfu:.1%} | {row['assumed']} |")
    out += ["", f"GPU-hours source: {data['source_gpu_hours']}."]
    return "\n".join(out) + "\n"


def _run(row: dict):
    return simulate(row["model"], row.get("system", "dgx-h100"), row["gpus"], global_batch=row["global_batch"],
                    seq_len=row["seq_len"], strategy=row["strategy"], tokens=float(row["tokens"]))


def rewrite(path: Path, text: str) -> bool:
    """Replace the section between MARKERS in `path` with `text`; whether it changed."""
    doc = path.read_text(encoding="utf-8")
    start, end = doc.index(MARKERS[0]) + len(MARKERS[0]), doc.index(MARKERS[1])
    new = doc[:start] + "\n" + text + doc[end:]
    if new != doc:
        path.write_text(new, encoding="utf-8")
    return new != doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, help="Rewrite the goodput section of this Markdown file.")
    args = parser.parse_args()
    text = tables()
    if args.markdown is None:
        print(text)
    else:
        print(f"{args.markdown}: {'rewritten' if rewrite(args.markdown, text) else 'unchanged'}")


if __name__ == "__main__":
    main()
