"""The `madmax` command: a thin typer layer over `madmax.api`.

Imports stay light at start-up (`madmax --help` loads no pandas or matplotlib); every MadmaxError
becomes one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from madmax.errors import MadmaxError


class _OneLineErrors(typer.core.TyperGroup):
    """The command group, with every usage error (a wrong type, a missing option, an unknown command) and
    any MadmaxError a command lets through printed as one line on stderr with exit status 2, as every
    other error, instead of typer's usage box."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            from typer._click import exceptions as click  # typer >= 0.24 carries its own copy of click
        except ImportError:
            from click import exceptions as click  # type: ignore[no-redef]

        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
            typer.echo(f"error: {' '.join(exc.format_message().split()).rstrip('.')}{hint}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        except MadmaxError as exc:
            typer.echo(f"error: {exc}", err=True)
            sys.exit(2)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_OneLineErrors,
                  help="Predict how fast large ML models train and serve on distributed GPU systems.")
catalog_app = typer.Typer(no_args_is_help=True, help="List and show catalog GPUs, systems, models and software stacks.")
app.add_typer(catalog_app, name="catalog")


class CatalogKind(StrEnum):
    models = "models"
    gpus = "gpus"
    systems = "systems"
    stacks = "stacks"


class TemplateKind(StrEnum):
    gpu = "gpu"
    system = "system"


class SchemaKind(StrEnum):
    model = "model"
    system = "system"
    gpu = "gpu"
    task = "task"
    strategy = "strategy"
    rl = "rl"


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _emit_json(data: Any) -> None:
    """`data` as JSON: a non-finite number (which JSON has no word for) as null, never NaN or Infinity."""
    typer.echo(json.dumps(_finite(data), indent=2, default=str, allow_nan=False))


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def _print_version(value: bool) -> None:
    if value:
        from madmax import __version__

        typer.echo(f"madmax {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    """Predict how fast large ML models train and serve on distributed GPU systems."""


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name, HF id, or a YAML/JSON/config.json file.")]
SystemOpt = Annotated[str, typer.Option("--system", "-s", help="Catalog system name or a YAML/JSON file.")]
NumGpusOpt = Annotated[int | None, typer.Option(help="Cluster size in GPUs (default: one node).")]
TaskOpt = Annotated[str, typer.Option(help="pretrain, finetune, inference or rl (RL post-training: --rl).")]
SeqLenOpt = Annotated[int | None, typer.Option(help="Tokens per sequence (default: the model's).")]
PromptLenOpt = Annotated[int | None, typer.Option(help="Prompt tokens per request (inference).")]
PromptLenStdOpt = Annotated[float | None, typer.Option(
    help="Standard deviation of the prompt tokens: each request's drawn from a normal of mean --prompt-len "
         "(aiperf's --isl-stddev; concurrency, saturation, rate, disaggregated modes).")]
OutputLenStdOpt = Annotated[float | None, typer.Option(
    help="Standard deviation of the output tokens, as aiperf's --osl-stddev.")]
OutputLenOpt = Annotated[int | None, typer.Option(help="Generated tokens per request (inference).")]
FinetuneOpt = Annotated[str | None, typer.Option(help="Fine-tuning method: full or lora.")]
LoraRankOpt = Annotated[int | None, typer.Option(help="LoRA rank r.")]
FrozenLayersOpt = Annotated[int | None, typer.Option(help="Bottom layers frozen (finetune).")]
LoraTargetsOpt = Annotated[str | None, typer.Option(help="LoRA projections, e.g. qkv,out,up,gate,down.")]
CalibrationOpt = Annotated[Path | None, typer.Option(help="Compute profile from `madmax calibrate`.")]
StackOpt = Annotated[str | None, typer.Option(help="Software stack. Inference: the serving stack, trtllm (default), "
                                                   "vllm, vllm-0.14, sglang, trtllm-0.9; training: the training "
                                                   "framework, "
                                                   "megatron-core (default), megatron-lm-2021, pytorch, fsdp2, "
                                                   "deepspeed, megatron-deepspeed, automodel, torchtitan, "
                                                   "torchtitan-compile, "
                                                   "llm-foundry, olmo-core, nanotron, deepspeed-zero3, and for "
                                                   "recommendation models hugectr, torchrec, tf2; or a YAML file. "
                                                   "`madmax catalog list stacks` describes each.")]
LaunchOpt = Annotated[str | None, typer.Option(help="Inference: how the engine is launched: sized (default: its "
                                                     "defaults, raised where they cannot serve the load), engine (its "
                                                     "defaults) or aiconfigurator (its generator's settings).")]
EngineOpt = Annotated[str | None, typer.Option(help='Inference: engine settings over the stack, e.g. '
                                                     '"max_num_tokens=16384,chunked_prefill=1,max_batch=256".')]
SearchStackOpt = Annotated[str | None, typer.Option(help="Software stack. Inference: the serving stack every layout "
                                                         "is costed under, trtllm (default), vllm, sglang, trtllm-0.9, "
                                                         "or a YAML file; training: the stack the reported strategies "
                                                         "are simulated under (megatron-core default, fsdp2, "
                                                         "deepspeed, hugectr, ...; screened with Megatron-Core's "
                                                         "schedule under its kernel profile).")]

ExpertLoadOpt = Annotated[str | None, typer.Option(help="MoE routing load: balanced (default), the busiest expert "
                                                        "rank's tokens over the mean (e.g. 1.3), or zipf:ALPHA.")]
CapacityFactorOpt = Annotated[float | None, typer.Option(help="MoE expert capacity over the mean share; tokens "
                                                              "beyond it are dropped (default: dropless).")]
PrefixLenOpt = Annotated[int | None, typer.Option(help="Prompt tokens every request shares (prefix caching: "
                                                    "cached once per engine; inference).")]
PrefixHitOpt = Annotated[float | None, typer.Option(help="Share of requests that find the shared prefix cached "
                                                      "(0-1, default 1).")]
SpeculativeOpt = Annotated[str | None, typer.Option(help="Speculative decoding (inference): ngram, eagle, mtp "
                                                         "(the model's MTP modules) or draft (--draft-model).")]
DraftModelOpt = Annotated[str | None, typer.Option(help="The draft model of --speculative draft: a catalog model or "
                                                        "a file, smaller than --model, with its vocabulary.")]
DraftLenOpt = Annotated[int | None, typer.Option(help="Tokens drafted a step (speculative; mtp default 1).")]
AcceptanceOpt = Annotated[float | None, typer.Option(help="Chance each drafted token is accepted, 0-1 "
                                                          "(speculative; mtp default 0.85).")]
ScenarioOpt = Annotated[str | None, typer.Option(help="MLPerf Inference scenario: offline (saturation), server or "
                                                      "interactive (rate mode within the benchmark's p99 TTFT and "
                                                      "TPOT limits; catalog scenarios.yaml).")]
PriceOpt = Annotated[float | None, typer.Option(help="USD per GPU-hour, overriding the system's price (cost "
                                                    "objective and the result's cost block).")]
PowerOpt = Annotated[float | None, typer.Option(help="W per GPU at load, the rest of the node included, overriding "
                                                    "the system's node power (energy objective and cost block).")]


@app.command()
def simulate(
    model: ModelOpt,
    system: SystemOpt,
    num_gpus: NumGpusOpt = None,
    task: TaskOpt = "pretrain",
    global_batch: Annotated[int | None, typer.Option(help="Sequences per optimizer step.")] = None,
    seq_len: SeqLenOpt = None,
    dtype: Annotated[str | None, typer.Option(help="Compute dtype: bf16, fp16, fp8, fp32; on Blackwell also "
                                                    "mxfp8 (training) and nvfp4; serving also int8 (W8A8), int4 "
                                                    "(weight-only; aliases awq, gptq) and mxfp4 (default bf16, "
                                                    "or fp16 on GPUs without bf16).")] = None,
    strategy: Annotated[str | None, typer.Option(help='e.g. "tp=8,pp=4,dp=32,vp=1,mbs=1,zero=1,'
                                                      'recompute=selective,sp=1"; mixture of experts: '
                                                      '"ep=8,etp=1,ep_overlap=1,dispatcher=deepep"; '
                                                      'pipeline layout: "pp_embedding=1,pp_loss=1" or '
                                                      '"pp_layout=Et*3|(tt|)*29,m|L" (Megatron\'s grammar; quote '
                                                      'the |); recommendation models: '
                                                      '"emb=tw|rw|cw|twrw|dp,emb_group=G,emb_offload=1" or '
                                                      '"emb=hybrid,emb_cold=twrw,emb_dp_bytes=6.25e6,'
                                                      'emb_shard_cost=16.75".')] = None,
    batch: Annotated[int | None, typer.Option(help="Requests at once per replica (inference; the largest tried "
                                                   "in saturation mode).")] = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    prompt_len_std: PromptLenStdOpt = None,
    output_len_std: OutputLenStdOpt = None,
    mode: Annotated[str | None, typer.Option(help="Serving mode: static (default), concurrency, saturation, rate, "
                                                  "disaggregated.")] = None,
    kv_dtype: Annotated[str | None, typer.Option(help="KV-cache format (inference): bf16, fp16, fp8.")] = None,
    request_rate: Annotated[float | None, typer.Option(help="Requests/s arriving (rate mode; Poisson).")] = None,
    num_requests: Annotated[int | None, typer.Option(help="Requests simulated (rate, concurrency, "
                                                          "disaggregated modes).")] = None,
    arrivals: Annotated[Path | None, typer.Option(help="CSV of requests for rate mode: arrival_s, prompt_len, "
                                                       "output_len.")] = None,
    max_ttft: Annotated[float | None, typer.Option(help="Time-to-first-token limit for goodput, seconds.")] = None,
    max_tpot: Annotated[float | None, typer.Option(help="Time-per-output-token limit for goodput, seconds.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the Poisson arrivals (rate mode) and of drawn request "
                                                  "lengths.")] = None,
    slo: Annotated[str | None, typer.Option(help='Latency objectives (rate mode), e.g. "p99_ttft=1,p99_tpot=50ms": '
                                                 "checked, or without --request-rate the highest rate that meets "
                                                 "them is found.")] = None,
    scenario: ScenarioOpt = None,
    prefix_len: PrefixLenOpt = None,
    prefix_hit: PrefixHitOpt = None,
    speculative: SpeculativeOpt = None,
    draft_len: DraftLenOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_model: DraftModelOpt = None,
    stack: StackOpt = None,
    launch: LaunchOpt = None,
    engine: EngineOpt = None,
    finetune: FinetuneOpt = None,
    lora_rank: LoraRankOpt = None,
    frozen_layers: FrozenLayersOpt = None,
    lora_targets: LoraTargetsOpt = None,
    expert_load: ExpertLoadOpt = None,
    capacity_factor: CapacityFactorOpt = None,
    calibration: CalibrationOpt = None,
    price: PriceOpt = None,
    power: PowerOpt = None,
    tokens: Annotated[float | None, typer.Option(help="Tokens to train (training): adds the expected time, "
                                                      "GPU-hours, cost and energy with failures, checkpoints, "
                                                      "restarts and stragglers.")] = None,
    reliability: Annotated[str | None, typer.Option(help="Reliability profile for --tokens: llama3-h100 "
                                                         "(default), ideal (none), or a YAML file.")] = None,
    checkpoint_interval: Annotated[float | None, typer.Option(help="Seconds between checkpoints for --tokens "
                                                                   "(default: the optimum).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    trace: Annotated[Path | None, typer.Option(help="Write a Chrome/Perfetto trace JSON here.")] = None,
    commands: Annotated[bool, typer.Option("--commands", help="Also print the command lines that launch it: "
                                                              "Megatron-LM and torchtitan flags (training), the "
                                                              "serving stack's engine (vllm serve, "
                                                              "sglang.launch_server, trtllm-serve).")] = False,
    rl: Annotated[str | None, typer.Option(help='--task rl: the RL step, e.g. "prompts=64,samples=32,'
                                                'layout=disaggregated,rollout_gpus=8" or a YAML file (docs/rl.md); '
                                                "--prompt-len and --output-len (the mean response) per sample, "
                                                "--strategy and --stack the training step's.")] = None,
) -> None:
    """Predict one training iteration, a serving deployment or an RL post-training step: time, throughput,
    breakdown and memory."""
    from madmax import api

    if task == "rl":
        given = {"global_batch": global_batch, "seq_len": seq_len, "batch": batch, "mode": mode,
                 "prompt_len_std": prompt_len_std, "kv_dtype": kv_dtype, "request_rate": request_rate,
                 "num_requests": num_requests, "arrivals": arrivals, "max_ttft": max_ttft, "max_tpot": max_tpot,
                 "seed": seed, "launch": launch, "engine": engine, "finetune": finetune, "lora_rank": lora_rank,
                 "frozen_layers": frozen_layers, "lora_targets": lora_targets, "price": price, "power": power,
                 "tokens": tokens, "reliability": reliability, "checkpoint_interval": checkpoint_interval,
                 "slo": slo, "scenario": scenario, "prefix_len": prefix_len, "speculative": speculative,
                 "commands": commands or None}
        if extra := [name for name, value in given.items() if value is not None]:
            _fail(f"{extra[0]} does not apply to task=rl; allowed: --rl, --prompt-len, --output-len (the mean "
                  "response), --output-len-std, --dtype, --strategy, --stack (the training step's), --calibration, "
                  "--trace, --json")
            return
        _simulate_rl(model, system, num_gpus, rl, prompt_len, output_len, output_len_std, dtype, strategy, stack,
                     calibration, as_json, trace)
        return
    if rl is not None:
        _fail("rl describes an RL post-training step; allowed: --task rl with it, or leave it out")
        return
    try:
        result = api.simulate(model=model, system=system, num_gpus=num_gpus, task=task,
                              global_batch=global_batch, seq_len=seq_len, dtype=dtype, strategy=strategy,
                              batch=batch, prompt_len=prompt_len, output_len=output_len,
                              prompt_len_std=prompt_len_std, output_len_std=output_len_std, mode=mode,
                              kv_dtype=kv_dtype, request_rate=request_rate, num_requests=num_requests,
                              arrivals=arrivals, max_ttft=max_ttft, max_tpot=max_tpot, seed=seed, stack=stack,
                              launch=launch, engine=engine, finetune=finetune, lora_rank=lora_rank,
                              frozen_layers=frozen_layers,
                              lora_targets=lora_targets.split(",") if lora_targets else None,
                              expert_load=expert_load, capacity_factor=capacity_factor,
                              calibration=calibration, keep_schedule=trace is not None, price=price,
                              power=power, tokens=tokens, reliability=reliability,
                              checkpoint_interval=checkpoint_interval, slo=slo, scenario=scenario,
                              prefix_len=prefix_len, prefix_hit=prefix_hit, speculative=speculative,
                              draft_len=draft_len, acceptance=acceptance, draft_model=draft_model)
        if trace is not None:
            from madmax.report.trace import write_trace

            write_trace(result, trace)
            typer.echo(f"wrote trace {trace} (open it in https://ui.perfetto.dev or chrome://tracing)", err=True)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    if as_json:
        _emit_json(result.to_dict())
        return
    from madmax.report.text import print_launches, print_result, print_serving
    from madmax.results.serving import ServingResult

    if isinstance(result, ServingResult):
        print_serving(result)
    else:
        print_result(result)
    if commands:
        print_launches(result.launch, result.launch_note)


def _simulate_rl(model, system, num_gpus, rl, prompt_len, output_len, output_len_std, dtype, strategy, stack,
                 calibration, as_json: bool, trace: Path | None = None) -> None:
    """`madmax simulate --task rl`: one RL post-training step (madmax.rl)."""
    from madmax.rl import simulate_rl

    try:
        setup = _rl_setup(rl, prompt_len, output_len, output_len_std)
        result = simulate_rl(model, system, num_gpus, setup, prompt_len=prompt_len, response_len=output_len,
                             dtype=dtype, strategy=strategy, stack=stack, calibration=calibration)
        if trace is not None:
            from madmax.report.trace import write_trace

            write_trace(result, trace)
            typer.echo(f"wrote trace {trace} (three steps, one track per pool; open it in https://ui.perfetto.dev)",
                       err=True)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    if as_json:
        _emit_json(result.to_dict())
        return
    from madmax.report.text import print_rl

    print_rl(result)


@app.command()
def inspect(
    model: Annotated[str, typer.Argument(help="Catalog name, HF id, or a model file.")],
    seq_len: Annotated[int | None, typer.Option(help="Sequence length for FLOPs per token.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Show a model's normalized shape, parameter counts and FLOPs per token."""
    from madmax import api

    try:
        info = api.inspect(model, seq_len=seq_len)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    if as_json:
        _emit_json(info)
        return
    from madmax.report.text import print_inspect

    print_inspect(info)


@catalog_app.command("list")
def catalog_list(kind: Annotated[CatalogKind, typer.Argument(help="models, gpus, systems or stacks.")]) -> None:
    """List catalog entries of one kind (stacks: the training and serving stacks `--stack NAME` takes)."""
    from madmax.report.text import print_catalog_list

    print_catalog_list(kind.value)


@catalog_app.command("show")
def catalog_show(name: Annotated[str, typer.Argument(help="A GPU, system, model or stack name or alias.")]) -> None:
    """Show one catalog entry with its sources."""
    import yaml

    from madmax.config.loaders import find_in_catalog
    from madmax.config.stack import stack_entry
    from madmax.config.training_stack import training_stack_entry

    found = [(kind[:-1], find_in_catalog(kind, name)) for kind in ("models", "systems", "gpus")]
    found += [("training stack", training_stack_entry(name)), ("serving stack", stack_entry(name))]
    for kind, entry in found:
        if entry is not None:
            typer.echo(f"# {kind} {entry['name']}")
            typer.echo(yaml.safe_dump(entry, sort_keys=False, allow_unicode=True).rstrip())
            return
    _fail(f"catalog name {name!r} is not a model, system, GPU or stack; "
          "see `madmax catalog list models|systems|gpus|stacks`")


@catalog_app.command("template")
def catalog_template(
    kind: Annotated[TemplateKind, typer.Argument(help="gpu or system.")],
    out: Annotated[Path | None, typer.Option("--out", help="Write it to this file (default: print it).")] = None,
) -> None:
    """Write an annotated YAML file of a GPU or a system to fill in from a datasheet (valid as it stands)."""
    from madmax.config.checks import writable_file
    from madmax.hardware.profile import catalog_path

    text = catalog_path(f"templates/{kind.value}.yaml").read_text(encoding="utf-8")
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        writable_file(out, "out")
        if out.exists():
            raise MadmaxError(f"out={str(out)!r} exists; allowed: a new file name (a template never overwrites)")
        out.write_text(text, encoding="utf-8")
    except MadmaxError as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(f"out={str(out)!r} cannot be written: {exc.strerror or exc}")
        return
    nxt = ("madmax catalog template system (gpu: " + str(out) + ")" if kind is TemplateKind.gpu
           else f"madmax simulate -m llama-3.1-8b -s {out}")
    typer.echo(f"wrote {out}: fill in its numbers and sources from the datasheet, then: {nxt}", err=True)


@app.command()
def schema(kind: Annotated[SchemaKind, typer.Argument(help="model, system, gpu, task, strategy or rl.")]) -> None:
    """Print the JSON Schema of an input file kind."""
    from madmax.config.hardware import GPU, System
    from madmax.config.model import DecoderModel
    from madmax.config.rl import RLSetup
    from madmax.config.strategy import Strategy
    from madmax.config.task import Task

    schema_of = {"model": DecoderModel, "system": System, "gpu": GPU, "task": Task, "strategy": Strategy,
                 "rl": RLSetup}
    _emit_json(schema_of[kind.value].model_json_schema())


# --- validate, calibrate, bench ------------------------------------------------------------------


@app.command()
def validate(
    datasets: Annotated[list[str] | None, typer.Argument(
        help="narayanan2021, korthikanti2022, nemo, vtrain_single, vtrain_multi, nvidia_dlrm, "
             "megatron_bridge_moe, automodel_moe, trtllm_static, serving_h100, mlperf_amd, or CSV files; default "
             "all.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summaries as JSON.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write every row's result to this CSV.")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write the report page (docs/validation.md).")] = None,
    calibration: Annotated[str | None, typer.Option(help="Compute profile for every row (default shipped).")] = None,
    vtrain_stack: Annotated[bool, typer.Option(help="Also re-run held-out vTrain rows with the vTrain-stack "
                                                    "profile.")] = True,
    cross_source: Annotated[bool | None, typer.Option(
        "--cross-source/--no-cross-source", help="Also score each source with the fits of its own rows left out "
                                                 "(default: on unless --calibration).")] = None,
    write_bands: Annotated[bool, typer.Option(help="Regenerate the error-band table of madmax.validate.trust "
                                                   "(all datasets, cross-source residuals).")] = False,
    jobs: Annotated[int | None, typer.Option(help="Worker processes (default: CPU count).")] = None,
    sample: Annotated[int | None, typer.Option(help="At most N rows per dataset (quick look).")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (on a terminal).")] = True,
) -> None:
    """Compare predictions with measured training and serving runs: error statistics, worst rows, groupings."""
    from madmax.terminal import shown
    from madmax.validate import command

    try:
        if write_bands:
            command.check_bands_request(datasets, calibration, sample, cross_source)
        if sample is not None and sample < 1:
            _fail(f"--sample={sample} must be a positive number of rows")
        command.check_outputs(out, markdown)
        with shown("validate", "rows", enabled=progress):
            report = command.run(datasets, calibration=calibration, vtrain_stack=vtrain_stack,
                                 cross_source=cross_source, jobs=jobs, sample=sample)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    if out is not None:
        command.write_rows(report, out)
    if markdown is not None:
        markdown.write_text(command.page(report), encoding="utf-8")
    if write_bands:
        typer.echo(f"wrote {command.write_bands_of(report)}", err=True)
    if as_json:
        _emit_json(report.summary_dict())
    elif markdown is None:
        typer.echo(report.to_markdown())


@app.command()
def calibrate(
    files: Annotated[list[Path], typer.Argument(help="Kernel JSONL, nccl-tests output, iteration-time CSV.")],
    out: Annotated[Path, typer.Option("--out", help="The profile YAML to write (read by --calibration).")],
    base: Annotated[str | None, typer.Option(help="Profile whose other parameters are kept.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Catalog GPU of the kernel file when its name is not.")] = None,
    held_out: Annotated[bool, typer.Option(help="Also report held-out errors (refits).")] = True,
    jobs: Annotated[int | None, typer.Option(help="Worker processes for iteration-time fits.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar of the rows simulated (on a terminal).")] = True,
    stack: Annotated[str | None, typer.Option(help="Training stack the iteration rows ran under (default: "
                                                   "megatron-core).")] = None,
) -> None:
    """Fit a compute profile to measured kernels, collectives or iteration times."""
    import os

    from madmax.config.checks import writable_file
    from madmax.terminal import shown
    from madmax.validate.calibrate import calibrate as fit
    from madmax.validate.calibrate import write_profile

    try:
        writable_file(out, "--out", make_folder=True)
        with shown("calibrate", "rows", enabled=progress):
            profile, lines = fit(files, base=base, gpu=gpu, held_out=held_out, jobs=jobs or os.cpu_count() or 1,
                                 stack=stack)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    command = "madmax calibrate " + " ".join(str(f) for f in files) + f" --out {out}"
    write_profile(profile, out, command + (f" --base {base}" if base else "") + (f" --gpu {gpu}" if gpu else "")
                  + (f" --stack {stack}" if stack else ""))
    typer.echo("\n".join([*lines, f"wrote {out}"]))


bench_app = typer.Typer(no_args_is_help=True, help="Measure this machine for `madmax calibrate` (needs torch).")
app.add_typer(bench_app, name="bench")


@bench_app.command("gpu")
def bench_gpu(
    out: Annotated[Path, typer.Option("--out", help="Kernel JSONL to write.")] = Path("kernels.jsonl"),
    device: Annotated[str | None, typer.Option(help="cuda, cuda:N or cpu (default: a GPU if any).")] = None,
    tiny: Annotated[bool | None, typer.Option(help="Small shapes (default on a CPU).")] = None,
    repeats: Annotated[int | None, typer.Option(help="Timed launches per kernel.")] = None,
) -> None:
    """Time GEMM, attention and memory kernels, in the format `madmax calibrate` reads."""
    from madmax.bench.kernels import bench_kernels

    try:
        rows = bench_kernels(out, device=device, tiny=tiny, repeats=repeats)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    typer.echo(f"wrote {rows} rows to {out}")


@bench_app.command("comm")
def bench_comm(
    out: Annotated[Path, typer.Option("--out", help="nccl-tests-like text to write.")] = Path("comm.txt"),
    backend: Annotated[str | None, typer.Option(help="nccl (GPUs) or gloo (CPU).")] = None,
    nprocs: Annotated[int | None, typer.Option(help="Processes (default: GPUs, or 2 with gloo).")] = None,
    collectives: Annotated[str | None, typer.Option(help="e.g. all_reduce,all_gather (default all five).")] = None,
    min_bytes: Annotated[int | None, typer.Option(help="Smallest message, bytes.")] = None,
    max_bytes: Annotated[int | None, typer.Option(help="Largest message, bytes.")] = None,
    iters: Annotated[int | None, typer.Option(help="Timed runs per size.")] = None,
) -> None:
    """Measure collective bus bandwidth with torch.distributed, as nccl-tests output."""
    from madmax.bench.comm import COLLECTIVES
    from madmax.bench.comm import bench_comm as run

    try:
        chosen = tuple(c.strip() for c in collectives.split(",")) if collectives else COLLECTIVES
        run(out, backend=backend, nprocs=nprocs, collectives=chosen, min_bytes=min_bytes, max_bytes=max_bytes,
            iters=iters)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    typer.echo(f"wrote {out}")


@app.command()
def search(
    model: ModelOpt,
    system: SystemOpt,
    num_gpus: NumGpusOpt = None,
    task: TaskOpt = "pretrain",
    global_batch: Annotated[int | None, typer.Option(help="Sequences per optimizer step (required for "
                                                          "training).")] = None,
    seq_len: SeqLenOpt = None,
    dtype: Annotated[str | None, typer.Option(help="Compute dtype: bf16, fp16, fp8, fp32.")] = None,
    objective: Annotated[str, typer.Option(help="throughput, time, cost or energy.")] = "throughput",
    tokens: Annotated[float | None, typer.Option(help="Tokens to train, for time/cost/energy "
                                                      "(default: one iteration).")] = None,
    reliability: Annotated[str | None, typer.Option(help="Reliability profile of --tokens' time to train "
                                                         "(llama3-h100 default, ideal, or a YAML file).")] = None,
    top: Annotated[int, typer.Option(help="Strategies to report (each one simulated).")] = 10,
    out: Annotated[Path | None, typer.Option(help="Write every evaluated candidate to this .parquet file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the top strategies as JSON.")] = False,
    max_tp: Annotated[int | None, typer.Option(help="Largest tensor-parallel degree.")] = None,
    max_pp: Annotated[int | None, typer.Option(help="Largest pipeline-parallel degree.")] = None,
    max_cp: Annotated[int | None, typer.Option(help="Largest context-parallel degree.")] = None,
    max_vp: Annotated[int | None, typer.Option(help="Most virtual pipeline chunks per stage.")] = None,
    max_mbs: Annotated[int | None, typer.Option(help="Largest micro-batch.")] = None,
    zero: Annotated[str | None, typer.Option(help='ZeRO stages to try, e.g. "1,3" (default 0,1,2,3).')] = None,
    recompute: Annotated[str | None, typer.Option(help='Recompute modes, e.g. "none,selective".')] = None,
    hybrid: Annotated[bool, typer.Option(help="Try hybrid sharding groups (shard=...).")] = True,
    orders: Annotated[str | None, typer.Option(help='Placement orders, comma-separated, or "all" '
                                                    '(default tp-cp-ep-dp-pp).')] = None,
    exact: Annotated[int | None, typer.Option(help="Best candidates re-simulated (default max(20, 2*top)).")] = None,
    refine: Annotated[int, typer.Option(help="Best candidates replayed step by step.")] = 2000,
    workers: Annotated[int, typer.Option(help="Processes for the re-simulation.")] = 1,
    finetune: FinetuneOpt = None,
    lora_rank: LoraRankOpt = None,
    frozen_layers: FrozenLayersOpt = None,
    lora_targets: LoraTargetsOpt = None,
    emb: Annotated[str | None, typer.Option(help='Embedding shardings to try (models with tables), e.g. '
                                                 '"tw,rw" (default tw,rw,cw,twrw,dp,hybrid).')] = None,
    emb_balance: Annotated[str | None, typer.Option(help='What placing tables balances, to try (models with '
                                                         'tables; tw, cw, hybrid), e.g. "size,lookup,count" '
                                                         '(default size).')] = None,
    max_ep: Annotated[int | None, typer.Option(help="Largest expert-parallel degree (MoE models).")] = None,
    max_etp: Annotated[int | None, typer.Option(help="Largest expert-tensor-parallel degree (MoE models).")] = None,
    ep_overlap: Annotated[str | None, typer.Option(help='All-to-all overlap settings to try (MoE models), e.g. "1" '
                                                        '(default 0,1).')] = None,
    tp_overlap: Annotated[str | None, typer.Option(help='TP communication overlap settings the simulated candidates '
                                                        'try (tp > 1 with sequence parallelism): "0,1" simulates '
                                                        'each twice and keeps the faster (default 0).')] = None,
    dispatcher: Annotated[str | None, typer.Option(help='Token dispatchers the simulated MoE candidates try (ep > '
                                                        '1): "alltoall,deepep" simulates each with both and keeps '
                                                        'the faster (default alltoall).')] = None,
    expert_load: ExpertLoadOpt = None,
    capacity_factor: CapacityFactorOpt = None,
    fp8_params: Annotated[bool, typer.Option(help="With --dtype fp8: keep every candidate's GEMM weights in fp8 "
                                                  "only (strategy key fp8_params; ZeRO 0-2).")] = False,
    memory_margin: Annotated[str | None, typer.Option(help="Memory each GPU keeps free in a training search: a share "
                                                           "(5%, default) or bytes (4GiB); 0 uses it all.")] = None,
    calibration: CalibrationOpt = None,
    price: PriceOpt = None,
    power: PowerOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    prompt_len_std: PromptLenStdOpt = None,
    output_len_std: OutputLenStdOpt = None,
    mode: Annotated[str, typer.Option(help="Serving mode simulated for the best (inference): static, "
                                           "concurrency, saturation.")] = "static",
    stack: SearchStackOpt = None,
    dtypes: Annotated[str | None, typer.Option(help='Weight formats to try (inference), e.g. "bf16,fp8" '
                                                    'or "int8,awq,mxfp4" (default bf16/fp16, fp8 and fp4 where '
                                                    'the GPU has them).')] = None,
    kv_dtypes: Annotated[str | None, typer.Option(help='KV-cache formats to try (inference), e.g. "fp8".')] = None,
    max_ttft: Annotated[float | None, typer.Option(help="Time-to-first-token limit (inference), s.")] = None,
    max_tpot: Annotated[float | None, typer.Option(help="Time-per-output-token limit (inference), s.")] = None,
    max_batch: Annotated[int | None, typer.Option(help="Largest batch per replica (inference).")] = None,
    request_rate: Annotated[float | None, typer.Option(help="Requests per second to serve (inference capacity "
                                                            "search: the deployments that meet --slo; --system "
                                                            "may list several, comma-separated).")] = None,
    slo: Annotated[str | None, typer.Option(help='Latency objectives of a capacity search, e.g. '
                                                 '"p99_ttft=1,p99_tpot=50ms": mean|p50|p90|p99 of '
                                                 'ttft|tpot|itl|e2e, seconds or ms.')] = None,
    num_requests: Annotated[int | None, typer.Option(help="Requests simulated per replica at each rate a capacity "
                                                          "search tries (default 1000).")] = None,
    arrivals: Annotated[Path | None, typer.Option(help="CSV of requests to serve (capacity search: columns "
                                                       "arrival_s, prompt_len, output_len; replaces "
                                                       "--request-rate and the lengths).")] = None,
    deployments: Annotated[str | None, typer.Option(help='Deployments a capacity search plans: "aggregated" '
                                                         '(default: replicas of one engine), "disaggregated" '
                                                         '(prefill and decode workers in a ratio) or both, '
                                                         'comma-separated.')] = None,
    scenario: ScenarioOpt = None,
    prefix_len: PrefixLenOpt = None,
    prefix_hit: PrefixHitOpt = None,
    speculative: SpeculativeOpt = None,
    draft_len: DraftLenOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_model: DraftModelOpt = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar of the strategies simulated (on a "
                                                "terminal).")] = True,
    rl: Annotated[str | None, typer.Option(help='--task rl: the RL step, e.g. "prompts=64,samples=32" (docs/rl.md); '
                                                "settings it states (layout, rollout_gpus, rollout_tp, "
                                                "asynchronous) are held, the others searched.")] = None,
) -> None:
    """Search every valid strategy (or serving layout, with --task inference, or RL layout, with --task rl); print
    the best, each simulated."""
    import time

    if task == "rl":
        others = {k: v for k, v in locals().items()
                  if k not in ("model", "system", "num_gpus", "task", "rl", "prompt_len", "output_len",
                               "output_len_std", "dtype", "stack", "calibration", "top", "as_json", "progress", "time")}
        defaults = {"objective": "throughput", "refine": 2000, "workers": 1, "hybrid": True, "fp8_params": False,
                    "mode": "static"}
        if given := [k for k, v in others.items() if v is not None and v != defaults.get(k)]:
            _fail(f"{given[0]} does not apply to an RL layout search; allowed: --rl, --prompt-len, --output-len (the "
                  "mean response), --output-len-std, --dtype, --stack (the training step's), --calibration, --top, "
                  "--json")
        _search_rl(model, system, num_gpus, rl, prompt_len, output_len, output_len_std, dtype, stack, calibration,
                   top, as_json, progress)
        return
    if rl is not None:
        _fail("rl describes an RL post-training step; allowed: --task rl with it, or leave it out")

    training_only = {"global_batch": global_batch, "seq_len": seq_len, "dtype": dtype, "tokens": tokens,
                     "reliability": reliability,
                     "zero": zero, "recompute": recompute, "max_cp": max_cp, "max_vp": max_vp, "max_mbs": max_mbs,
                     "orders": orders, "emb": emb, "emb_balance": emb_balance, "finetune": finetune,
                     "lora_rank": lora_rank,
                     "frozen_layers": frozen_layers, "lora_targets": lora_targets, "out": out, "max_ep": max_ep,
                     "max_etp": max_etp, "ep_overlap": ep_overlap, "tp_overlap": tp_overlap,
                     "dispatcher": dispatcher,
                     "expert_load": expert_load,
                     "capacity_factor": capacity_factor, "fp8_params": fp8_params or None,
                     "objective": None if objective == "throughput" else objective, "hybrid": None if hybrid else False,
                     "refine": None if refine == 2000 else refine, "workers": None if workers == 1 else workers,
                     "price": price, "power": power, "memory_margin": memory_margin}
    serving_only = {"prompt_len": prompt_len, "output_len": output_len, "mode": None if mode == "static" else mode,
                    "dtypes": dtypes, "kv_dtypes": kv_dtypes, "max_ttft": max_ttft,
                    "max_tpot": max_tpot, "max_batch": max_batch}
    if task == "inference" and (request_rate is not None or arrivals is not None or slo is not None
                                or scenario is not None):
        capacity_refuses = {**{k: v for k, v in training_only.items() if k not in ("objective", "price", "power")},
                            "mode": serving_only["mode"], "max_ttft": max_ttft, "max_tpot": max_tpot,
                            "max_batch": max_batch}
        if given := [name for name, value in capacity_refuses.items() if value is not None]:
            _fail(f"{given[0]} does not apply to a capacity search (--request-rate, --slo); allowed: prompt_len, "
                  "output_len, prompt_len_std, output_len_std, slo, deployments, stack, dtypes, kv_dtypes, max_tp, "
                  "max_pp, "
                  "num_gpus (the most GPUs), objective (throughput, cost, energy), price, power, top, exact, "
                  "num_requests, calibration, json")
        _search_capacity(model, system, num_gpus, prompt_len, output_len, request_rate=request_rate,
                         arrivals=arrivals, slo=slo, deployments=deployments,
                         scenario=scenario, prefix_len=prefix_len, prefix_hit=prefix_hit, speculative=speculative,
                         draft_len=draft_len, acceptance=acceptance, draft_model=draft_model,
                         prompt_len_std=prompt_len_std,
                         output_len_std=output_len_std,
                         stack=stack, dtypes=dtypes, kv_dtypes=kv_dtypes, max_tp=max_tp, max_pp=max_pp,
                         objective=objective, top=top, exact=exact, num_requests=num_requests, price=price,
                         power=power, calibration=calibration, as_json=as_json, progress=progress)
        return
    capacity_only = {"num_requests": num_requests, "scenario": scenario, "deployments": deployments,
                     "prefix_len": prefix_len,
                     "prefix_hit": prefix_hit, "speculative": speculative, "draft_len": draft_len,
                     "acceptance": acceptance, "draft_model": draft_model, "prompt_len_std": prompt_len_std,
                     "output_len_std": output_len_std}
    if given := [name for name, value in capacity_only.items() if value is not None]:
        _fail(f"{given[0]} applies to a capacity search; allowed: --task inference with --request-rate and --slo or "
              "--scenario")
    if task == "inference":
        if given := [name for name, value in training_only.items() if value is not None]:
            _fail(f"{given[0]} applies to training searches; allowed with --task inference: "
                  f"{', '.join(serving_only)}, stack, max_tp, max_pp, top, exact, calibration, json")
        _search_serving(model, system, num_gpus, prompt_len, output_len, mode=mode, stack=stack, dtypes=dtypes,
                        kv_dtypes=kv_dtypes, max_ttft=max_ttft, max_tpot=max_tpot, max_tp=max_tp, max_pp=max_pp,
                        max_batch=max_batch, top=top, exact=exact, calibration=calibration, as_json=as_json,
                        progress=progress)
        return
    if given := [name for name, value in serving_only.items() if value is not None]:
        _fail(f"{given[0]} applies to serving searches; allowed: --task inference, or omit it")

    from madmax.search.api import find, to_frame
    from madmax.search.core import summary
    from madmax.search.text import print_search, report
    from madmax.terminal import shown

    def numbers(text: str | None, field: str) -> list[int] | None:
        if text is None:
            return None
        try:
            return [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            _fail(f"{field}={text!r} must be integers separated by commas, e.g. 1,3")
            raise

    try:
        if out is not None and out.suffix.lower() != ".parquet":
            raise MadmaxError(f"out={str(out)!r} must be a .parquet file; allowed: a path ending in .parquet")
        start = time.perf_counter()
        with shown("search", "simulations", enabled=progress):
            outcome = find(model, system, num_gpus, task, global_batch, seq_len, dtype, objective=objective,
                           tokens=tokens, top=top, exact=exact, refine=refine, max_tp=max_tp, max_pp=max_pp,
                           max_cp=max_cp, max_vp=max_vp, max_mbs=max_mbs, zero=numbers(zero, "zero"),
                           recompute=recompute.split(",") if recompute else None, hybrid=hybrid,
                           orders=orders.split(",") if orders else None, calibration=calibration,
                           workers=workers, finetune=finetune, lora_rank=lora_rank, frozen_layers=frozen_layers,
                           lora_targets=lora_targets.split(",") if lora_targets else None,
                           emb=emb.split(",") if emb else None,
                           emb_balance=emb_balance.split(",") if emb_balance else None, max_ep=max_ep, max_etp=max_etp,
                           ep_overlap=numbers(ep_overlap, "ep_overlap"),
                           tp_overlap=numbers(tp_overlap, "tp_overlap"),
                           dispatcher=dispatcher.split(",") if dispatcher else None, expert_load=expert_load,
                           capacity_factor=capacity_factor, stack=stack, fp8_params=fp8_params, price=price,
                           power=power, reliability=reliability, memory_margin=memory_margin)
        wall = time.perf_counter() - start
        if out is not None:
            try:
                to_frame(outcome).to_parquet(out)
            except ImportError:
                raise MadmaxError("out needs pandas and pyarrow; install madmax[dev]") from None
            except OSError as exc:
                raise MadmaxError(f"out={str(out)!r} cannot be written: {exc.__class__.__name__}") from None
    except MadmaxError as exc:
        _fail(str(exc))
        return
    if as_json:
        info = report(outcome, top, wall)
        _emit_json({**info, "objective": {"name": outcome.scorer.objective.value, "unit": outcome.scorer.unit},
                    "results": [summary(outcome, i) for i in outcome.top(top)]})
        return
    print_search(outcome, top, wall)


def _rl_setup(rl, prompt_len, output_len, output_len_std):
    """The RL step of `--rl` with `--output-len-std` as its response spread; MadmaxError without the lengths."""
    from madmax.config.rl import load_rl

    if prompt_len is None or output_len is None:
        raise MadmaxError("task=rl needs --prompt-len and --output-len (the mean response) in tokens per sample")
    setup = load_rl(rl)
    if output_len_std is not None:
        setup = load_rl({**setup.model_dump(exclude_unset=True), "response_len_std": output_len_std})
    return setup


def _search_rl(model, system, num_gpus, rl, prompt_len, output_len, output_len_std, dtype, stack, calibration,
               top: int, as_json: bool, progress: bool) -> None:
    """`madmax search --task rl`: every RL layout of the step, each simulated (madmax.rl.search)."""
    from madmax.report.text import print_rl_search
    from madmax.rl.search import find_rl

    def run():
        setup = _rl_setup(rl, prompt_len, output_len, output_len_std)
        return find_rl(model, system, num_gpus, setup, prompt_len=prompt_len, response_len=output_len, dtype=dtype,
                       stack=stack, calibration=calibration)

    _run_serving_search(run, lambda found, k: found.to_dict(k), print_rl_search, top, as_json, progress, "search")


def _search_capacity(model, system, num_gpus, prompt_len, output_len, *, request_rate: float | None,
                     arrivals: Path | None, as_json: bool, dtypes: str | None, kv_dtypes: str | None, progress: bool,
                     top: int, **options) -> None:
    """`madmax search --task inference --request-rate R --slo ...` (or `--arrivals trace.csv`): the deployments
    that serve the load within the SLOs (madmax.search.capacity)."""
    from madmax.search.capacity import find_capacity, summary
    from madmax.search.text import print_capacity

    if request_rate is None and arrivals is None:
        _fail("a capacity search (--slo, --scenario) needs the load: it finds the deployments that serve it within "
              "the SLOs; allowed: --request-rate R (or --arrivals trace.csv) with --slo or --scenario")
    systems = [s.strip() for s in system.split(",") if s.strip()] if "," in system else system
    _run_serving_search(lambda: find_capacity(model, systems, request_rate=request_rate, arrivals=arrivals,
                                              prompt_len=prompt_len,
                                              output_len=output_len, max_gpus=num_gpus, top=top,
                                              dtypes=_listed(dtypes), kv_dtypes=_listed(kv_dtypes), **options),
                        summary, print_capacity, top, as_json, progress, "capacity search")


def _search_serving(model, system, num_gpus, prompt_len, output_len, *, as_json: bool, dtypes: str | None,
                    kv_dtypes: str | None, progress: bool, **options) -> None:
    """`madmax search --task inference`: the serving layouts (madmax.search.serving)."""
    from madmax.search.serving import find_serving, summary
    from madmax.search.text import print_serving_search

    _run_serving_search(lambda: find_serving(model, system, num_gpus, prompt_len=prompt_len, output_len=output_len,
                                             dtypes=_listed(dtypes), kv_dtypes=_listed(kv_dtypes), **options),
                        summary, print_serving_search, options["top"], as_json, progress, "search")


def _listed(text: str | None) -> list[str] | None:
    return text.split(",") if text else None


def _run_serving_search(run, summary, printer, top: int, as_json: bool, progress: bool, label: str) -> None:
    """Run a serving search (its progress bar shown on a terminal), then print it or its JSON summary."""
    import time

    from madmax.terminal import shown

    try:
        start = time.perf_counter()
        with shown(label, "simulations", enabled=progress):
            found = run()
        wall = time.perf_counter() - start
    except MadmaxError as exc:
        _fail(str(exc))
        return
    if as_json:
        _emit_json({**summary(found, top), "wall_s": wall})
        return
    printer(found, top, wall)


# --- sweep, query, report ------------------------------------------------------------------------


@contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Within it, each warning prints as one line 'warning: ...' on stderr (e.g. a quarantined shard)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *_, **__: typer.echo(f"warning: {message}", err=True)
        yield


@app.command()
def sweep(
    spec: Annotated[Path, typer.Argument(help="Sweep file (YAML): models, systems, sizes, tasks, what-ifs.")],
    out: Annotated[Path | None, typer.Option("--out", help="Results folder (default: <spec file name>-results); "
                                                           "an existing one is resumed.")] = None,
    dask: Annotated[str | None, typer.Option(help="Run on dask: 'local' (a LocalCluster) or a scheduler "
                                                  "address tcp://HOST:PORT.")] = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: CPU count).")] = None,
    price: Annotated[list[str] | None, typer.Option(help="USD per GPU-hour overriding the catalog and the "
                                                         "file: SYSTEM=USD, or USD for all; repeatable.")] = None,
    power: Annotated[list[str] | None, typer.Option(help="W per GPU at load (the rest of the node included) "
                                                         "overriding the catalog: SYSTEM=W, or W for all; "
                                                         "repeatable.")] = None,
    limit: Annotated[int | None, typer.Option(help="Stop after this many new points (resume later); a sweep "
                                                   "of over 1,000,000 points runs in such parts.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar with rate and ETA.")] = True,
) -> None:
    """Evaluate every point of a sweep into Parquet shards; an interrupted sweep resumes where it stopped."""
    from madmax.sweep.runner import parse_powers, parse_prices, run_sweep
    from madmax.sweep.spec import load_sweep

    try:
        prices = parse_prices(price or [])
        powers = parse_powers(power or [])
        if limit is not None and limit < 1:
            raise MadmaxError(f"--limit={limit} must be a positive number of points")
        loaded = load_sweep(spec)
        directory = out or Path(f"{spec.stem}-results")
        with _warnings_as_lines():
            summary = run_sweep(loaded, directory, workers=workers, dask=dask, prices=prices, powers=powers,
                                progress=progress, stop_after=limit)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    except KeyboardInterrupt:
        typer.echo(f"interrupted: the rows so far are saved in {out or spec.stem + '-results'}; "
                   "run the same command to resume", err=True)
        raise typer.Exit(130) from None
    s = summary
    typer.echo(f"{s.total} points: {s.done_before} done before, {s.computed} computed in {s.wall_s:.1f} s "
               f"({s.points_per_s:.1f} points/s); {s.errors} errors, {s.no_fit} without a fitting strategy"
               + (f", {s.failed} failed (see {directory / 'failures.jsonl'})" if s.failed else ""))
    if s.remaining:
        typer.echo(f"{s.remaining} points remain; run the same command to resume")
    typer.echo(f"results: {directory} (madmax query {directory} \"SELECT * FROM results LIMIT 5\")")
    if s.computed or s.done_before:
        from madmax.sweep.codesign import findings_of

        for line in findings_of(directory):
            typer.echo(line)
    if s.failed:
        raise typer.Exit(1)


@app.command()
def query(
    directory: Annotated[Path, typer.Argument(help="Results folder of `madmax sweep`.")],
    sql: Annotated[str, typer.Argument(help='SQL over the table `results`, e.g. "SELECT system, '
                                            'min(cost_usd) FROM results GROUP BY system".')],
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
) -> None:
    """Run SQL (DuckDB) over the Parquet shards of a sweep, one row per point; the table is named `results`."""
    from madmax.sweep.store import display_value, query_rows

    try:
        if fmt not in ("table", "csv", "json"):
            raise MadmaxError(f"--format={fmt!r} is unknown; allowed: table, csv, json")
        with _warnings_as_lines():
            columns, rows = query_rows(directory, sql)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    except ImportError:
        _fail("query needs duckdb; install madmax[dev]")
        return
    if fmt == "json":
        _emit_json([dict(zip(columns, r, strict=True)) for r in rows])
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        from rich.table import Table

        from madmax.terminal import make_console

        table = Table(*columns)
        for r in rows:
            table.add_row(*(display_value(v) for v in r))
        make_console().print(table)  # piped: wide enough that no cell wraps


@app.command()
def report(
    directory: Annotated[Path, typer.Argument(help="Results folder of `madmax sweep`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML page to write.")] = Path("report.html"),
    png: Annotated[Path | None, typer.Option(help="Also write each figure as a PNG into this folder.")] = None,
    search_table: Annotated[Path | None, typer.Option("--search", help="A `madmax search --out` .parquet "
                                                                       "table to rank.")] = None,
) -> None:
    """Write one self-contained HTML page: Pareto frontier, strategy ranking, co-design, breakdowns."""
    from madmax.report.html import write_report

    try:
        written = write_report(directory, out, png_dir=png, search_table=search_table)
    except MadmaxError as exc:
        _fail(str(exc))
        return
    typer.echo(f"wrote {out}" + (f" and {len(written)} PNG files in {png}" if png else ""))


@app.command()
def web(
    host: Annotated[str, typer.Option(help="Address to listen on (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    browser: Annotated[bool, typer.Option(help="Open the page in the default browser.")] = True,
    data_dir: Annotated[Path, typer.Option(help="Folder of the sweeps' results (<name>-results).")] = Path(
        "madmax-web"),
    workers: Annotated[int | None, typer.Option(help="Simulation processes (default: up to 4).")] = None,
    search_limit: Annotated[float | None, typer.Option(help="Longest a search may run, seconds (default 120).")] = None,
    simulate_limit: Annotated[float | None, typer.Option(
        help="Longest a simulation may run, seconds (default 60).")] = None,
) -> None:
    """Serve the HTTP API and a page to plan a run by looking at it (needs the web extra); see docs/web.md."""
    try:
        from madmax.web import Settings, serve
    except ImportError:
        _fail("madmax web needs fastapi and uvicorn; install madmax[web]")
        return
    try:
        if workers is not None and workers < 1:
            raise MadmaxError(f"--workers={workers} must be a positive number of processes")
        for option, value in (("--search-limit", search_limit), ("--simulate-limit", simulate_limit)):
            if value is not None and not 0 < value <= 86400:
                raise MadmaxError(f"{option}={value:g} must be a number of seconds above 0, at most 86400")
        options = {"workers": workers, "search_time_limit_s": search_limit, "simulate_time_limit_s": simulate_limit}
        settings = Settings(data_dir=data_dir, **{k: v for k, v in options.items() if v is not None})
        serve(host=host, port=port, open_browser=browser, settings=settings)
    except MadmaxError as exc:
        _fail(str(exc))


def main() -> None:
    _tolerant_streams()
    try:
        app()
    except MadmaxError as exc:  # a last guard: library errors never escape as tracebacks
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # the output cannot be written: a full disk, a closed pipe
        if exc.errno not in (errno.ENOSPC, errno.EPIPE, errno.EIO):
            raise
        _quiet_stdout()
        sys.stderr.write(f"error: the output could not be written ({exc.strerror or exc})\n")
        sys.exit(2 if exc.errno != errno.EPIPE else 0)  # a reader that stopped early (`| head`) is no error


def _tolerant_streams() -> None:
    """Characters the terminal's encoding lacks (PYTHONIOENCODING=ascii: '±', box lines) print as '?' rather
    than end the command."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # a stream already closed or detached
                stream.reconfigure(errors="replace")


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
