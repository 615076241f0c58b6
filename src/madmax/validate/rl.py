"""RL post-training steps predicted against published ones (`data/rl/published_rl.csv`, sources in each row).

The rows state the prompts, samples, layout, rollout and training parallelism, optimizer steps, the average and the
longest sequence (prompt + response) and the step's seconds. They do not state the prompt length or how the
response lengths spread; the mapping assumes both and says so (`ASSUMED_PROMPT`, a lognormal spread as wide as
the mean response): the rollout lasts until its longest response ends, so the spread matters.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data") / "rl" / "published_rl.csv"
# Tokens of a prompt where a row does not state them: the math prompts of these recipes (OpenMathInstruct-2 and
# DAPO-Math problems) are a few hundred tokens with the chat template. An ASSUMPTION, stated in every row.
ASSUMED_PROMPT = 256
MARKERS = ("<!-- rl-validation:start (python -m madmax.validate.rl --write) -->", "<!-- rl-validation:end -->")


@dataclass(frozen=True)
class RLRow:
    row: str
    source: str
    measured_s: float
    predicted_s: float
    phases_s: dict[str, float]
    case: str
    assumed: str

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_s - self.measured_s) / self.measured_s


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def predict(row: dict[str, str]) -> RLRow:
    """Simulate one published RL step as its row states it, with the prompt and spread assumed."""
    from madmax.rl import simulate_rl

    response = int(row["avg_seq_len"]) - ASSUMED_PROMPT
    setup: dict[str, Any] = {"prompts": int(row["prompts"]), "samples": int(row["samples"]),
                             "mini_batches": int(row["mini_batches"]), "rollout_tp": int(row["rollout_tp"]),
                             "layout": row["layout"], "response_len_std": response,
                             "max_response_len": int(row["max_seq_len"]) - ASSUMED_PROMPT}
    if row["layout"] == "disaggregated":
        setup.update(rollout_gpus=int(row["rollout_gpus"]), asynchronous=row["asynchronous"] == "1")
    r = simulate_rl(row["model"], row["system"], int(row["num_gpus"]), setup, prompt_len=ASSUMED_PROMPT,
                    response_len=response, strategy=row["train_strategy"])
    pools = (f"{row['rollout_gpus']} rollout + {int(row['num_gpus']) - int(row['rollout_gpus'])} train"
             + (", async" if setup.get("asynchronous") else "")) if row["layout"] == "disaggregated" else "colocated"
    case = (f"{row['model']} {row['num_gpus']}x{row['system']} {pools}; {row['prompts']}x{row['samples']}, "
            f"rollout tp{row['rollout_tp']}, train {row['train_strategy']}")
    assumed = (f"prompt {ASSUMED_PROMPT} tokens, responses lognormal mean {response} std {response} cut at "
               f"{setup['max_response_len']}")
    return RLRow(row["row"], row["source"], float(row["measured_step_s"]), r.step_time_s, r.phases_s, case, assumed)


def table(results: list[RLRow]) -> str:
    lines = ["| row | case | measured s | predicted s | error % | generation s | scoring s | training s | sync s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r.phases_s
        lines.append(f"| {r.row} | {r.case} | {r.measured_s:g} | {r.predicted_s:.1f} | {r.error_pct:+.0f} | "
                     f"{p['generation']:.1f} | {p['scoring']:.1f} | {p['training']:.1f} | {p['weight_sync']:.2f} |")
    import statistics

    median = statistics.median(abs(r.error_pct) for r in results)
    bias = statistics.median(r.error_pct for r in results)
    lines += ["", f"Median absolute error {median:.0f}%, median signed {bias:+.0f}% (negative: predicted faster) over "
              f"{len(results)} rows. Every row assumes {ASSUMED_PROMPT}-token prompts and lognormal response lengths "
              "whose standard deviation equals their mean, cut at the row's longest sequence less the prompt "
              "(neither is stated). Sources: " + "; ".join(f"{r.row}: {r.source}" for r in results) + "."]
    return "\n".join(lines)


def write(doc: Path, text: str) -> bool:
    """Replace the block between MARKERS in `doc`; whether it changed."""
    body = doc.read_text(encoding="utf-8")
    start, end = body.index(MARKERS[0]) + len(MARKERS[0]), body.index(MARKERS[1])
    new = body[:start] + "\n" + text + "\n" + body[end:]
    if new != body:
        doc.write_text(new, encoding="utf-8")
    return new != body


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="RL post-training steps predicted against published ones.")
    parser.add_argument("--write", action="store_true", help="rewrite the table of docs/rl.md")
    parser.add_argument("--doc", type=Path, default=Path("docs/rl.md"))
    args = parser.parse_args(argv)
    text = table([predict(r) for r in rows()])
    print(text)
    if args.write:
        print(f"{args.doc}: {'rewritten' if write(args.doc, text) else 'unchanged'}")


if __name__ == "__main__":
    main()
