"""`madmax bench gpu`: time GEMM, attention and memory kernels with PyTorch, in the kernel JSONL format.

The rows are those of `catalog/calibration/h200_kernels.jsonl` (its README: `catalog/calibration/
SOURCE.md`), which `madmax calibrate` fits:

    {"kind": "env", "torch", "device", "python", "name", "sms", "mem_gib", "cc"}
    {"kind": "hbm_copy" | "hbm_read", "bytes_moved", "time_s", "GBps"}     copy: read + write counted
    {"kind": "gemm", "dtype", "m", "k", "n", "flops", "time_s", "tflops", "bytes"}   (m x k) @ (k x n)
    {"kind": "attention", "causal", "batch", "heads", "seq", "head_dim", "fwd_s", "fwd_bwd_s", ...}
    {"kind": "decode_attention", "batch", "kv_len", "q_heads", "kv_heads", "head_dim", "time_s", "kv_bytes"}

Full size (a GPU): the shapes of the shipped H200 file. `tiny` (the default on a CPU): a few small
shapes that run in seconds. Each time is the mean over `repeats` back-to-back launches after warm-up,
launch overhead included (CUDA events on a GPU, the wall clock on a CPU).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from madmax.bench import import_torch
from madmax.errors import ConfigError

TINY_GEMM = [(m, k, n) for m in (1, 16, 64, 256) for k, n in ((128, 128), (256, 512), (512, 256))]
TINY_ATTENTION = [(1, 4, s, 32) for s in (64, 128, 256, 512)]  # batch, heads, seq, head_dim
TINY_DECODE = [(b, kv, 8, 2, 32) for b in (1, 4) for kv in (128, 512)]  # batch, kv, q heads, kv heads, d
TINY_COPY_BYTES = 1 << 24
FULL_COPY_BYTES = 1 << 32
GIGA, TERA = 1e9, 1e12


def _shipped_shapes() -> dict[str, list[dict[str, Any]]]:
    from madmax.hardware.calibration import load_records

    out: dict[str, list[dict[str, Any]]] = {}
    for r in load_records():
        out.setdefault(r["kind"], []).append(r)
    return out


def _timer(torch: Any, device: Any, repeats: int, warmup: int = 2) -> Callable[[Callable[[], Any]], float]:
    def mean_s(fn: Callable[[], Any]) -> float:
        for _ in range(warmup):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                fn()
            end.record()
            torch.cuda.synchronize(device)
            return start.elapsed_time(end) / 1e3 / repeats
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) / repeats
    return mean_s


def _env(torch: Any, device: Any) -> dict[str, Any]:
    env = {"kind": "env", "torch": torch.__version__, "device": device.type, "python": platform.python_version()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env |= {"name": p.name, "sms": p.multi_processor_count, "mem_gib": round(p.total_memory / 2**30, 1),
                "cc": f"{p.major}.{p.minor}"}
    else:
        env |= {"name": f"cpu {platform.processor() or platform.machine()}", "threads": torch.get_num_threads()}
    return env


def _gemms(torch: Any, device: Any, mean_s: Callable, shapes: list[tuple[str, int, int, int]]) -> Iterator[dict]:
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}
    for name, m, k, n in shapes:
        if name.startswith("fp8"):
            row = _fp8_gemm(torch, device, mean_s, m, k, n)
            if row:
                yield row
            continue
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        a = torch.randn(m, k, device=device, dtype=dtypes[name])
        b = torch.randn(k, n, device=device, dtype=dtypes[name])
        c = torch.empty(m, n, device=device, dtype=dtypes[name])
        t = mean_s(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
        width = a.element_size()
        yield {"kind": "gemm", "dtype": name, "m": m, "k": k, "n": n, "flops": 2 * m * k * n, "time_s": t,
               "tflops": 2 * m * k * n / t / TERA, "bytes": width * (m * k + k * n + m * n)}


def _fp8_gemm(torch: Any, device: Any, mean_s: Callable, m: int, k: int, n: int) -> dict | None:
    """fp8 e4m3 GEMM by torch._scaled_mm with bf16 output (needs compute capability >= 8.9)."""
    try:
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        t = mean_s(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    except (RuntimeError, AttributeError, TypeError):
        return None
    return {"kind": "gemm", "dtype": "fp8_e4m3", "m": m, "k": k, "n": n, "flops": 2 * m * k * n, "time_s": t,
            "tflops": 2 * m * k * n / t / TERA, "bytes": m * k + k * n + 2 * m * n}


def _attention(torch: Any, device: Any, mean_s: Callable, shapes: list[tuple[int, int, int, int]]) -> Iterator[dict]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for batch, heads, seq, d in shapes:
        q, k, v = (torch.randn(batch, heads, seq, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(batch, heads, seq, d, device=device, dtype=torch.bfloat16)
        with torch.no_grad():
            fwd = mean_s(lambda q=q, k=k, v=v: sdpa(q, k, v, is_causal=True))
        both = mean_s(lambda q=q, k=k, v=v, g=grad: sdpa(q, k, v, is_causal=True).backward(g))
        flops = 2 * 2 * batch * heads * seq * seq * d / 2
        yield {"kind": "attention", "causal": True, "batch": batch, "heads": heads, "seq": seq, "head_dim": d,
               "fwd_s": fwd, "fwd_bwd_s": both, "fwd_tflops": flops / fwd / TERA,
               "fwd_bwd_tflops": 3.5 * flops / both / TERA}


def _decode(torch: Any, device: Any, mean_s: Callable, shapes: list[tuple[int, int, int, int, int]]) -> Iterator[dict]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for batch, kv_len, hq, hkv, d in shapes:
        q = torch.randn(batch, hq, 1, d, device=device, dtype=torch.bfloat16)
        k, v = (torch.randn(batch, hkv, kv_len, d, device=device, dtype=torch.bfloat16) for _ in range(2))
        try:
            sdpa(q, k, v, enable_gqa=True)
        except TypeError:  # torch < 2.5: no grouped-query flag; repeat the KV heads instead
            k, v = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
            t = mean_s(lambda q=q, k=k, v=v: sdpa(q, k, v))
        else:
            t = mean_s(lambda q=q, k=k, v=v: sdpa(q, k, v, enable_gqa=True))
        kv_bytes = 2 * batch * hkv * kv_len * d * 2
        yield {"kind": "decode_attention", "batch": batch, "kv_len": kv_len, "q_heads": hq, "kv_heads": hkv,
               "head_dim": d, "time_s": t, "kv_bytes": kv_bytes, "GBps": kv_bytes / t / GIGA}


def _memory(torch: Any, device: Any, mean_s: Callable, num_bytes: int) -> Iterator[dict]:
    src = torch.empty(num_bytes // 4, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    t = mean_s(lambda: dst.copy_(src))
    yield {"kind": "hbm_copy", "bytes_moved": 2 * num_bytes, "time_s": t, "GBps": 2 * num_bytes / t / GIGA}
    t = mean_s(lambda: src.sum())
    yield {"kind": "hbm_read", "bytes_moved": num_bytes, "time_s": t, "GBps": num_bytes / t / GIGA}


def _plan(tiny: bool, fp8: bool) -> dict[str, list]:
    if tiny:
        return {"gemm": [(dt, *s) for dt in ("bf16", "fp32") for s in TINY_GEMM], "attention": TINY_ATTENTION,
                "decode": TINY_DECODE, "copy": TINY_COPY_BYTES}
    shipped = _shipped_shapes()
    gemm = [(r["dtype"], r["m"], r["k"], r["n"]) for r in shipped["gemm"] if fp8 or not r["dtype"].startswith("fp8")]
    attention = [(r["batch"], r["heads"], r["seq"], r["head_dim"]) for r in shipped["attention"]]
    return {"gemm": gemm, "attention": attention,
            "decode": [(r["batch"], r["kv_len"], r["q_heads"], r["kv_heads"], r["head_dim"])
                       for r in shipped["decode_attention"]],
            "copy": FULL_COPY_BYTES}


def bench_kernels(out: Path, *, device: str | None = None, tiny: bool | None = None,
                  repeats: int | None = None) -> int:
    """Measure the kernels on `device` ('cuda', 'cuda:1', 'cpu'; default a GPU if any) and write JSONL
    to `out`. tiny: small shapes (default on a CPU). Returns the number of rows written."""
    torch = import_torch()
    try:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        raise ConfigError(f"device={device!r} is unknown to torch; allowed: cuda, cuda:N, cpu") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r}: torch sees no CUDA GPU; allowed here: cpu")
    tiny = dev.type == "cpu" if tiny is None else tiny
    repeats = repeats or (5 if tiny else 20)
    mean_s = _timer(torch, dev, repeats)
    fp8 = dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= (8, 9)
    plan = _plan(tiny, fp8)
    rows = [_env(torch, dev), *_memory(torch, dev, mean_s, plan["copy"]),
            *_gemms(torch, dev, mean_s, plan["gemm"]), *_attention(torch, dev, mean_s, plan["attention"]),
            *_decode(torch, dev, mean_s, plan["decode"])]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return len(rows)
