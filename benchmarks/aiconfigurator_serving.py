"""AIConfigurator's predictions on the serving_h100 rows, for the side-by-side table of docs/validation.md.

    pip install aiconfigurator            # Apache-2.0, ai-dynamo/aiconfigurator
    python benchmarks/aiconfigurator_serving.py [--jobs N] [--limit N]

Runs `aiconfigurator.cli.api.cli_estimate` on every row of `serving/silicon_h100.csv` that madmax maps, with
the row's own columns (model, system, mode, backend and version, ISL/OSL, GEMM and MoE formats, batch size
and parallel layout, or the disaggregated workers' fields), and writes
`src/madmax/validate/data/serving/aiconfigurator_h100.csv`: per row its predicted TTFT and TPOT (ms), the
aiconfigurator version, and the backend version whose perf database answered. A row's measured backend
version is asked for first; without a database for it, the newest one is used (what aiconfigurator's own
accuracy tracking does, tools/accuracy_tracking/run_silicon.py), and the file says so. `madmax validate`
reads the file and prints the comparison; without aiconfigurator installed this script says so and exits 0.

It runs offline: models aiconfigurator keeps no config for (the gated Llama checkpoints) get a config.json
written from madmax's catalog (`write_configs`). AIConfigurator's perf database and its empirical
corrections were built from its own silicon measurements, of which these H100 rows are a part: on them it is
scored in-sample.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PARALLEL = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
DISAGG = tuple(f"{side}_{f}" for side in ("prefill", "decode") for f in (*PARALLEL, "batch_size", "num_workers"))
COLUMNS = ("row_id", "status", "ttft_ms", "tpot_ms", "aiconfigurator", "database_version", "note")
OUT = "serving/aiconfigurator_h100.csv"


def _kwargs(row: dict[str, str]) -> dict:
    """cli_estimate's arguments from the row's columns (aiconfigurator's own names)."""
    fields = ("batch_size", *PARALLEL) if row["mode"] == "agg" else DISAGG
    return {"model_path": row["model_path"], "system_name": row["system"], "mode": row["mode"],
            "backend_name": row["backend"], "backend_version": row["backend_version"] or None,
            "isl": int(row["isl"]), "osl": int(row["osl"]), "gemm_quant_mode": row["gemm_quant_mode"] or None,
            "moe_quant_mode": row["moe_quant_mode"] or None,
            **{f: int(float(row[f])) for f in fields if row.get(f)}}


def write_configs(directory: Path, rows: list[tuple[str, dict[str, str]]]) -> dict[str, str]:
    """For each row's model that aiconfigurator keeps no config of (the gated Llama checkpoints, which it would
    download), a directory holding a config.json written from madmax's catalog (the public architecture:
    layers, widths, heads, vocabulary), so that it runs offline on the same models; {Hugging Face id: dir}."""
    from aiconfigurator_core.sdk.common import DefaultHFModels

    from madmax.config.loaders import find_in_catalog
    from madmax.validate.serving import SERVING_MODELS

    local = {}
    for hf_id in sorted({r["model_path"] for _, r in rows} - set(DefaultHFModels)):
        entry = find_in_catalog("models", SERVING_MODELS.get(hf_id, ""))
        if entry is None or entry.get("moe"):
            continue
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "num_hidden_layers": entry["num_layers"], "hidden_size": entry["hidden_size"],
                  "num_attention_heads": entry["num_heads"], "num_key_value_heads": entry["num_kv_heads"],
                  "head_dim": entry["hidden_size"] // entry["num_heads"], "intermediate_size": entry["ffn_hidden_size"],
                  "vocab_size": entry["vocab_size"], "max_position_embeddings": entry["max_seq_len"],
                  "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
        folder = directory / hf_id.replace("/", "--")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        local[hf_id] = str(folder)
    return local


def _estimate(item: tuple[str, dict[str, str], str | None]) -> dict[str, str]:
    os.environ.setdefault("AIC_ALLOW_UNLISTED_VERSIONS", "1")
    from aiconfigurator.cli.api import cli_estimate

    row_id, row, local = item
    kwargs = _kwargs(row)
    if local:
        kwargs["model_path"] = local
    out = dict.fromkeys(COLUMNS, "")
    out.update(row_id=row_id, aiconfigurator=version("aiconfigurator"))

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = cli_estimate(**kwargs)
        out.update(status="ok", ttft_ms=f"{result.ttft:.6g}", tpot_ms=f"{result.tpot:.6g}",
                   database_version=str(result.backend_version))

    try:
        try:
            run()
        except ValueError as exc:
            if kwargs["backend_version"] is None or "perf database" not in str(exc):
                raise
            asked = kwargs["backend_version"]
            kwargs["backend_version"] = None
            run()
            out["note"] = f"no database for {row['backend']} {asked}; the newest answered"
    except Exception as exc:  # aiconfigurator refuses a row: recorded, not fatal
        out.update(status=type(exc).__name__, note=str(exc).splitlines()[0][:160] if str(exc) else "")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, default=None, help="At most N rows (a quick look).")
    args = parser.parse_args()
    try:
        version("aiconfigurator")
    except PackageNotFoundError:
        print("aiconfigurator is not installed (pip install aiconfigurator): nothing to compare; skipped")
        return 0
    from madmax.validate.datasets import load_datasets, read_rows

    (dataset,) = load_datasets(["serving_h100"])
    mapped = {c.row_id.rsplit(":", 1)[0] for c in dataset.cases}
    rows = [(i, r) for i, r in read_rows("serving/silicon_h100.csv") if i in mapped][: args.limit]
    with tempfile.TemporaryDirectory() as configs:
        local = write_configs(Path(configs), rows)
        jobs = [(i, r, local.get(r["model_path"])) for i, r in rows]
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            results = list(pool.map(_estimate, jobs, chunksize=4))
    path = Path(str(resources.files("madmax.validate.data").joinpath(OUT)))
    partial = path.with_suffix(".csv.partial")  # written whole, then moved over the old file
    with open(partial, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(results)
    os.replace(partial, path)
    ok = sum(r["status"] == "ok" for r in results)
    print(f"wrote {path}: {ok} of {len(results)} rows predicted by aiconfigurator {version('aiconfigurator')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
