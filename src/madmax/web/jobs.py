"""Sweeps started over HTTP: each a background thread calling `madmax.sweep.run_sweep` into the same
Parquet store the CLI writes (`<data dir>/<sweep name>-results`), with its progress kept for polling.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from madmax.errors import ConfigError, MadmaxError

# A sweep's name becomes its results folder: letters, digits, '.', '_' and '-' only.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass
class Job:
    id: str
    name: str
    directory: Path
    state: str = "running"  # running, done, failed
    done: int = 0
    total: int = 0
    error: str | None = None
    summary: dict[str, Any] | None = None
    started: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "directory": str(self.directory), "state": self.state,
                "done": self.done, "total": self.total, "error": self.error, "summary": self.summary}


def parse_spec(spec: dict | str) -> dict[str, Any]:
    """The sweep file's content: a dict, or YAML text (a path is not read: the client's files are not the
    server's)."""
    if isinstance(spec, str):
        try:
            spec = yaml.safe_load(spec)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"spec is not valid YAML{where}; allowed: a sweep file's content") from None
    if not isinstance(spec, dict):
        raise ConfigError("spec must be a sweep file's content (a mapping with name, models, systems, ...)")
    return spec


class Jobs:
    """The sweeps of this server, by id; one running sweep per results folder."""

    def __init__(self, data_dir: Path, workers: int) -> None:
        self.data_dir, self.workers = Path(data_dir), workers
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()

    def start(self, spec: dict | str, workers: int | None, limit: int | None) -> Job:
        from madmax.sweep import load_sweep

        loaded = load_sweep(parse_spec(spec))  # a bad sweep is refused here, with its sentence
        if not NAME.fullmatch(loaded.name):
            raise ConfigError(f"name={loaded.name!r} names the results folder; allowed: letters, digits, "
                              "'.', '_' and '-'")
        directory = self.data_dir / f"{loaded.name}-results"
        with self.lock:
            if any(j.directory == directory and j.state == "running" for j in self.jobs.values()):
                raise ConfigError(f"a sweep named {loaded.name!r} is already running; allowed: wait for it, "
                                  "or give the sweep another name")
            job = Job(id=uuid.uuid4().hex[:12], name=loaded.name, directory=directory)
            self.jobs[job.id] = job
        thread = threading.Thread(target=self._run, args=(job, loaded, workers or self.workers, limit),
                                  name=f"sweep-{job.id}", daemon=True)
        thread.start()
        return job

    def _run(self, job: Job, loaded: Any, workers: int, limit: int | None) -> None:
        from madmax.sweep import run_sweep

        def progress(done: int, total: int) -> None:
            job.done, job.total = done, total

        try:
            s = run_sweep(loaded, job.directory, workers=workers, on_progress=progress, stop_after=limit)
            job.done, job.total = s.done_before + s.computed + s.failed, s.total
            job.summary = {"total": s.total, "done_before": s.done_before, "computed": s.computed,
                           "errors": s.errors, "no_fit": s.no_fit, "failed": s.failed, "wall_s": s.wall_s,
                           "remaining": s.remaining}
            job.state = "done"
        except MadmaxError as exc:
            job.error, job.state = str(exc), "failed"
        except Exception as exc:  # a bug: its name, never a traceback, reaches the client
            job.error, job.state = f"the sweep failed with an internal error ({exc.__class__.__name__})", "failed"

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job
