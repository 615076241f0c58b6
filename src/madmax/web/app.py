"""The HTTP API and the page (FastAPI): the same inputs, results and one-sentence errors as `madmax.api`.

    POST /simulate          madmax.simulate's keyword arguments -> its to_dict()
    POST /simulate/view     the same, with what the page draws (breakdown bars, memory per stage, timeline)
    POST /search            streams NDJSON: started, progress (every PROGRESS_S), then result or error
    POST /sweep             starts a sweep into <data dir>/<name>-results -> 202 {"id", ...}
    GET  /sweep/{id}        its progress; GET /sweep/{id}/pareto the frontier of two objectives
    GET  /catalog/{models,systems,gpus}, GET /trace/{id}.json, GET /health, GET /openapi.json, GET / (the page)

Bad input is a 400 (`MadmaxError`), 413 (body too large), 422 (malformed request) or 429 (too many
searches), each with {"error": one sentence}; an internal error is a 500 naming only the exception class.
Simulations run in a process pool, each search in its own process, sweeps in a thread each: a long job
does not hold up a short one, and the event loop only waits.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from madmax import __version__
from madmax.config.checks import files_under
from madmax.errors import ConfigError, MadmaxError
from madmax.web import work
from madmax.web.jobs import Jobs
from madmax.web.schemas import (
    CAPACITY_RENAMED,
    CAPACITY_SEARCH_FIELDS,
    RL_SEARCH_FIELDS,
    SERVING_SEARCH_FIELDS,
    TRAINING_SEARCH_FIELDS,
    RLRequest,
    SearchRequest,
    SimulateRequest,
    SweepRequest,
    sentence,
)

MB = 2**20
CATALOG_KINDS = ("models", "systems", "gpus")
# Seconds between the progress lines of a streaming search.
PROGRESS_S = 0.5
# Traces of the latest page simulations kept for GET /trace (gzip-compressed, each a few MB at most).
TRACES_KEPT = 16


@dataclass(frozen=True)
class Settings:
    """What the server allows and how much it runs at once (the `madmax web` options)."""

    data_dir: Path = Path("madmax-web")  # sweeps' results folders go here
    workers: int = max(1, min(4, os.cpu_count() or 1))  # simulation processes
    sweep_workers: int = max(1, min(4, os.cpu_count() or 1))  # processes of a sweep (default; a request may ask)
    max_searches: int = 2  # searches running at once; more are refused (429)
    search_time_limit_s: float = 120.0  # a search running longer is stopped; a request may ask for less
    # A simulation running longer is stopped: its pool's processes are killed and replaced (a simulation in
    # flight beside it is answered 503, try again).
    simulate_time_limit_s: float = 60.0
    max_body_bytes: int = MB  # request bodies (an uploaded config.json travels in one)
    timeline_segments: int = 4000  # segments of the page's timeline plot (the longest kept)
    # Segments of one stream closer than this fraction of the iteration are one bar of the timeline plot
    # (on a plot 1,500 pixels wide, a third of a pixel).
    timeline_merge: float = 2e-4
    # Host header values answered (without the port); None: any. `serve` sets the loopback names when bound to
    # loopback, so that a page on another site cannot reach the API through a DNS name rebound to 127.0.0.1.
    allowed_hosts: tuple[str, ...] | None = None


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Clients name files on a machine that is not theirs: only those under the data directory are read, in
        # every simulation and search process and by a sweep's start (docs/web.md, "What the server reads").
        state["pool"] = work.simulation_pool(settings.workers, settings.data_dir)
        try:
            yield
        finally:
            state["pool"].shutdown(wait=False, cancel_futures=True)
            for process in searches:
                if process.is_alive():
                    process.kill()

    # FastAPI's /docs and /redoc pages load their scripts from a CDN: left out (no network at run time);
    # the OpenAPI document itself is served at /openapi.json.
    app = FastAPI(title="madmax", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Predict how fast large ML models train and serve on distributed GPU systems.")
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.allowed_hosts is not None:
        app.add_middleware(HostCheck, hosts=settings.allowed_hosts)
    jobs = Jobs(settings.data_dir, settings.sweep_workers)
    traces: OrderedDict[str, bytes] = OrderedDict()  # gzip-compressed Chrome traces
    searches: list[Any] = []  # the search processes started, pruned as they end
    _error_handlers(app)

    async def run_simulation(body: SimulateRequest, view: bool) -> dict[str, Any]:
        return await in_pool(work.simulate, body.model_dump(exclude_unset=True), view,
                             (settings.timeline_segments, settings.timeline_merge))

    async def in_pool(call: Any, *args: Any) -> dict[str, Any]:
        """`call(*args)` in the simulation pool, within the server's simulate time limit."""
        loop = asyncio.get_running_loop()
        pool = state["pool"]
        try:
            answer = await asyncio.wait_for(loop.run_in_executor(pool, call, *args), settings.simulate_time_limit_s)
        except TimeoutError:
            if state["pool"] is pool:
                state["pool"] = work.simulation_pool(settings.workers, settings.data_dir)
                work.kill_pool(pool)
            raise ConfigError(f"the simulation ran past this server's limit of {settings.simulate_time_limit_s:g} s "
                              "and was stopped; allowed: a smaller batch, fewer requests or GPUs, or a server "
                              "started with a longer limit") from None
        except BrokenProcessPool:
            if state["pool"] is pool:  # the first request to see it replaces the pool
                state["pool"] = work.simulation_pool(settings.workers, settings.data_dir)
                pool.shutdown(wait=False, cancel_futures=True)
            raise HTTPException(503, "a simulation process ended abruptly (out of memory?); the server started "
                                     "new ones: try again") from None
        outcome, data = answer
        if outcome == "error":
            raise ConfigError(data)
        return data

    @app.post("/simulate", summary="madmax.simulate(...).to_dict()")
    async def simulate(body: SimulateRequest) -> dict[str, Any]:
        return await run_simulation(body, view=False)

    @app.post("/simulate/view", summary="simulate, with the page's breakdown bars, memory and timeline")
    async def simulate_view(body: SimulateRequest) -> dict[str, Any]:
        data = await run_simulation(body, view=True)
        trace_id = os.urandom(6).hex()
        traces[trace_id] = data.pop("trace_gz")
        while len(traces) > TRACES_KEPT:
            traces.popitem(last=False)
        return {**data, "trace_url": f"/trace/{trace_id}.json"}

    @app.post("/rl", summary="madmax.simulate_rl(...).to_dict(): one RL post-training step")
    async def rl_step(body: RLRequest) -> dict[str, Any]:
        return await in_pool(work.simulate_rl, body.model_dump(exclude_unset=True))

    @app.get("/trace/{trace_id}.json", summary="Chrome trace of a /simulate/view result (Perfetto)")
    async def trace(trace_id: str) -> Response:
        if trace_id not in traces:
            raise HTTPException(404, f"trace {trace_id!r} is not kept (the latest {TRACES_KEPT} are); "
                                     "simulate again")
        return Response(traces[trace_id], media_type="application/json",
                        headers={"Content-Encoding": "gzip",
                                 "Content-Disposition": f'attachment; filename="madmax-{trace_id}.json"'})

    @app.post("/search", summary="madmax search, streamed as NDJSON progress then the result")
    async def search(body: SearchRequest) -> Response:
        kind, kwargs = _search_call(body)
        limit = body.time_limit_s or settings.search_time_limit_s
        if limit > settings.search_time_limit_s:
            raise ConfigError(f"time_limit_s={body.time_limit_s:g} is over this server's search limit; allowed: "
                              f"up to {settings.search_time_limit_s:g} s")
        searches[:] = [p for p in searches if p.is_alive()]
        if len(searches) >= settings.max_searches:
            raise HTTPException(429, f"{len(searches)} searches are running, the most this server runs at once; "
                                     "try again when one ends")
        ctx = work.context()
        messages = ctx.Queue()
        process = ctx.Process(target=work.search, args=(kind, kwargs, messages, settings.data_dir), daemon=True)
        process.start()
        searches.append(process)
        start = time.monotonic()
        try:
            first = await _next(messages, limit)
        except queue.Empty:
            process.kill()
            raise ConfigError(_over_limit(limit)) from None
        if first[0] == "error":
            process.join(timeout=1)
            raise ConfigError(first[1])
        return StreamingResponse(_stream(process, messages, start, limit, kind), media_type="application/x-ndjson")

    @app.post("/sweep", status_code=202, summary="start a sweep into the Parquet store; poll GET /sweep/{id}")
    async def sweep(body: SweepRequest) -> dict[str, Any]:
        if body.workers is not None and body.workers > settings.sweep_workers:
            raise ConfigError(f"workers={body.workers} is more than this server runs for one sweep; allowed: 1 to "
                              f"{settings.sweep_workers}")
        try:
            job = await asyncio.to_thread(_under, settings.data_dir, jobs.start, body.spec, body.workers, body.limit)
        except ImportError:
            raise ConfigError("sweeps need pandas and pyarrow; install madmax[dist]") from None
        return {**job.to_dict(), "status_url": f"/sweep/{job.id}", "pareto_url": f"/sweep/{job.id}/pareto"}

    @app.get("/sweep/{job_id}", summary="a sweep's progress and summary")
    async def sweep_status(job_id: str) -> dict[str, Any]:
        return _job(jobs, job_id).to_dict()

    @app.get("/sweep/{job_id}/pareto", summary="the sweep's rows and their Pareto frontier of x and y (minimized)")
    async def sweep_pareto(job_id: str, x: str = "cost_usd", y: str = "time_to_train_s") -> dict[str, Any]:
        job = _job(jobs, job_id)
        return await asyncio.to_thread(_pareto, job.directory, x, y)

    @app.get("/catalog/{kind}", summary="catalog entries of one kind, with their sources")
    async def catalog(kind: str) -> list[dict[str, Any]]:
        from madmax.config.loaders import catalog_entries

        if kind == "training_stacks":  # its own catalog file (a default and the stacks), named and described
            from madmax.config.training_stack import default_training_stack, training_stack_entry, training_stack_names

            default = default_training_stack()
            return [{"name": name, "description": training_stack_entry(name).get("description", ""),
                     "default": name == default} for name in training_stack_names()]
        if kind not in CATALOG_KINDS:
            raise HTTPException(404, f"catalog kind {kind!r} is unknown; allowed: "
                                     f"{', '.join((*CATALOG_KINDS, 'training_stacks'))}")
        return list(catalog_entries(kind).values())

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "workers": settings.workers,
                "searches_running": sum(p.is_alive() for p in searches),
                "search_time_limit_s": settings.search_time_limit_s,
                "simulate_time_limit_s": settings.simulate_time_limit_s, "max_body_bytes": settings.max_body_bytes}

    static = resources.files("madmax.web").joinpath("static")

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return FileResponse(str(static.joinpath("index.html")), media_type="text/html")

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    async def plotly_js() -> Response:
        path = _plotly_bundle()
        if path is None:
            raise HTTPException(404, "plots need the plotly Python package, whose plotly.min.js the page loads; "
                                     "install madmax[web]")
        return FileResponse(str(path), media_type="text/javascript")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app


def _under(root: Path, call: Any, *args: Any) -> Any:
    """`call(*args)` reading user-named files only under `root` (in a thread of the server's)."""
    with files_under(root):
        return call(*args)


def _search_call(body: SearchRequest) -> tuple[str, dict[str, Any]]:
    """("training" | "serving" | "capacity" | "rl", the search function's keyword arguments) of a request: with
    task=inference, a request_rate, slo or scenario makes it a capacity search; task=rl is the RL layout search."""
    given = {k: getattr(body, k) for k in body.model_fields_set if k != "time_limit_s"}
    if "model" not in given or "system" not in given:
        raise ConfigError("model and system are required")
    serving = str(given.get("task", "")).lower() == "inference"
    rl = str(given.get("task", "")).lower() == "rl"
    given = {k: v for k, v in given.items() if v is not None}
    capacity = serving and any(k in given for k in ("request_rate", "slo", "scenario"))
    kind = "rl" if rl else "capacity" if capacity else "serving" if serving else "training"
    allowed = {"capacity": CAPACITY_SEARCH_FIELDS, "serving": SERVING_SEARCH_FIELDS,
               "training": TRAINING_SEARCH_FIELDS, "rl": RL_SEARCH_FIELDS}[kind]
    if extra := sorted(k for k in given if k not in allowed | {"task"}):
        name = extra[0]
        if rl:
            raise ConfigError(f"{name} does not apply to an RL layout search (task=rl); allowed here: "
                              f"{', '.join(sorted(allowed))}")
        which = ("the RL layout search (task=rl)" if name in {"rl", "response_len"}
                 else "training searches" if name in TRAINING_SEARCH_FIELDS
                 else "serving searches (task=inference)" if name in SERVING_SEARCH_FIELDS & CAPACITY_SEARCH_FIELDS
                 else "capacity searches (task=inference with a request_rate)" if name in CAPACITY_SEARCH_FIELDS
                 else "the serving layout search (task=inference without a request_rate)")
        raise ConfigError(f"{extra[0]} applies to {which}; allowed here: {', '.join(sorted(allowed))}")
    if isinstance(given["system"], list) and kind != "capacity":
        raise ConfigError("system lists several systems, which only a capacity search (task=inference with a "
                          "request_rate) compares; allowed: one system")
    if serving or rl:  # the serving and RL searches have no task argument
        del given["task"]
    if capacity:
        arguments = {v: k for k, v in CAPACITY_RENAMED.items()}  # system -> systems, num_gpus -> max_gpus
        given = {arguments.get(k, k): v for k, v in given.items()}
    return kind, given


async def _next(messages: Any, timeout: float) -> tuple[str, Any]:
    return await asyncio.to_thread(messages.get, True, timeout)


async def _stream(process: Any, messages: Any, start: float, limit: float, kind: str) -> AsyncIterator[bytes]:
    """NDJSON lines of a running search; the process is stopped at the time limit or if the client leaves."""

    def line(event: dict[str, Any]) -> bytes:
        return (json.dumps(event, default=str) + "\n").encode()

    try:
        yield line({"event": "started", "kind": kind, "time_limit_s": limit})
        while True:
            elapsed = time.monotonic() - start
            if elapsed > limit:
                yield line({"event": "error", "error": _over_limit(limit)})
                return
            try:
                name, data = await _next(messages, min(PROGRESS_S, max(0.01, limit - elapsed)))
            except queue.Empty:
                if not process.is_alive():
                    yield line({"event": "error", "error": "the search process ended without a result "
                                                           f"(exit code {process.exitcode})"})
                    return
                yield line({"event": "progress", "elapsed_s": round(time.monotonic() - start, 3)})
                continue
            if name == "result":
                yield line({"event": "result", "elapsed_s": round(time.monotonic() - start, 3), "result": data})
                return
            if name == "error":
                yield line({"event": "error", "error": data})
                return
    finally:
        if process.is_alive():
            process.kill()
        process.join(timeout=1)


def _over_limit(limit: float) -> str:
    return (f"the search ran past its time limit of {limit:g} s; narrow it with max_tp, max_pp, zero, recompute "
            "or top, or raise time_limit_s up to the server's limit (GET /health)")


def _job(jobs: Jobs, job_id: str):
    try:
        return jobs.get(job_id)
    except KeyError:
        raise HTTPException(404, f"sweep {job_id!r} is unknown to this server") from None


def _pareto(directory: Path, x: str, y: str) -> dict[str, Any]:
    """The feasible rows (label columns and x, y) and the frontier of x and y, both minimized."""
    from madmax.sweep import load, pareto
    from madmax.sweep.store import shard_paths

    if not shard_paths(directory):
        return {"x": x, "y": y, "points": [], "frontier": []}
    df = load(directory)
    front = pareto(df, [x, y])
    labels = [c for c in ("model", "system", "num_gpus", "strategy", "whatif") if c in df.columns]
    ok = df[(df["status"] == "ok") & df["fits"].fillna(False).astype(bool)].dropna(subset=[x, y])

    def rows(frame) -> list[dict[str, Any]]:
        return json.loads(frame[[*labels, x, y]].to_json(orient="records"))

    return {"x": x, "y": y, "points": rows(ok), "frontier": rows(front)}


def _plotly_bundle() -> Path | None:
    """plotly.js as shipped inside the plotly Python package (no CDN)."""
    try:
        files = resources.files("plotly").joinpath("package_data", "plotly.min.js")
    except ModuleNotFoundError:
        return None
    path = Path(str(files))
    return path if path.is_file() else None


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MadmaxError)
    async def bad_input(_: Request, exc: MadmaxError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": sentence(exc)}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"internal error ({exc.__class__.__name__}); the input was accepted, so "
                                      "this is a madmax bug: please report it"}, status_code=500)


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413 and one sentence, before any route reads it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send, int(declared))
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                await self._refuse(scope, receive, send, size)
                return
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: dict, receive: Any, send: Any, size: int) -> None:
        limit = f"{self.limit / MB:g} MB" if self.limit >= MB else f"{self.limit:,} bytes"
        response = JSONResponse({"error": f"the request body is over {limit} ({size:,} bytes or more); allowed: up "
                                          f"to {limit} (a model's config.json is a few kB)"}, status_code=413)
        await response(scope, receive, send)


class HostCheck:
    """Answer only requests whose Host header (its name, without the port) is one of `hosts`: a 421 with one
    sentence otherwise (DNS rebinding: a page elsewhere whose name resolves to this loopback address)."""

    def __init__(self, app: Any, hosts: tuple[str, ...]) -> None:
        self.app, self.hosts = app, frozenset(h.lower() for h in hosts)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            header = dict(scope.get("headers") or ()).get(b"host", b"").decode("latin-1").lower()
            name = header[1:].split("]", 1)[0] if header.startswith("[") else header.rsplit(":", 1)[0]
            if name not in self.hosts:
                answer = JSONResponse({"error": f"host {header!r} is not this server's; allowed: "
                                                f"{', '.join(sorted(self.hosts))}"}, status_code=421)
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)
