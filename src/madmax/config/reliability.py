"""Reliability profiles (catalog/reliability.yaml): the interruption rates of a job's components, what a restart
and a checkpoint cost, and the spread of its GPUs' speeds. `madmax.results.goodput` turns a profile and a
simulated iteration into the expected wall-clock time to train a token budget (docs/goodput.md).
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import Field, model_validator

from madmax.config.base import Schema
from madmax.config.checks import path_rule, positive_number
from madmax.config.units import BytesPerS, Seconds
from madmax.errors import ConfigError

Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# Most spare nodes a profile holds: a bound on the input (the wait's Erlang C sum runs over them); a pool of
# this size waits no measurable time at any published fleet's failure rates.
MAX_SPARES = 100_000


class Per(StrEnum):
    """What an interruption rate counts per: each GPU of the job, or each node."""

    GPU = "gpu"
    NODE = "node"


class FailureClass(Schema):
    """Interruptions of one kind of component, per component-hour of the job."""

    component: str = Field(min_length=1, description="What fails, e.g. gpu, host, network, software.")
    per: Per = Field(description="gpu: the rate is per GPU-hour; node: per node-hour.")
    rate_per_hour: Rate = Field(description="Interruptions per component-hour (>= 0).")
    planned: bool = Field(False, description="A planned stop (maintenance, upgrades): the job saves a checkpoint "
                                             "first, so no work is lost, and restarts.")
    replaces_node: bool = Field(True, description="The failed node leaves the job for repair and a spare takes its "
                                                  "place (hardware); false: the job restarts on the same nodes "
                                                  "(software). Planned stops replace none.")
    source: str = Field("", description="Where the rate comes from.")


class Restart(Schema):
    """What an interruption costs besides the lost work: getting the job running again, then loading its checkpoint
    (timed from the checkpoint's size, `Checkpoint`)."""

    restart_s: Seconds = Field(ge=0, description="Detection, exclusion or replacement of the failed node, launch and "
                                                 "communicator set-up, s.")
    restart_source: str = ""
    repair_s: Seconds = Field(ge=0, description="Extra wait for the failed node without a spare, s.")
    repair_source: str = ""
    spare_nodes: bool = Field(True, description="Hot spares replace a failed node (no repair wait).")
    spares: int | None = Field(None, ge=0, le=MAX_SPARES, description="Spare nodes the job holds: a failed node is "
                               "replaced from them and returns after repair_s; a failure that finds none waits "
                               "(Erlang C). None: spare_nodes decides (as many as needed, or none).")
    warmup_s: Seconds = Field(0.0, ge=0, description="Slow first iterations after a restart, s.")


class Checkpoint(Schema):
    """How the job's state reaches storage. Every rank writes its share at once; the write runs at the lesser of
    the nodes' links (node_bytes_per_s x nodes) and the file system's aggregate. Asynchronous: the step stalls
    only for the copy of a rank's share to host memory, and the write completes in the background."""

    enabled: bool = True
    asynchronous: bool = True
    node_bytes_per_s: BytesPerS = Field(gt=0, description="Write and read bandwidth of one node to storage.")
    node_source: str = ""
    filesystem_bytes_per_s: BytesPerS = Field(gt=0, description="The file system's aggregate bandwidth.")
    filesystem_source: str = ""
    stall_s: Seconds = Field(ge=0, description="Blocking part of each save besides copying the state: the ranks' "
                                               "agreement on the save plan and its finalisation, s.")
    stall_source: str = ""
    interval_s: Seconds | None = Field(None, gt=0, description="Time between checkpoints, s (default: the "
                                                               "interval that minimises the expected time).")


class Stragglers(Schema):
    """Persistent per-GPU speed differences: a GPU's step time over the median GPU's is 1 + N(0, speed_sigma); a
    synchronous step waits for the slowest of the job's GPUs. exclude_slowest: share of the slowest GPUs of the
    fleet an operator keeps out of the job."""

    speed_sigma: float = Field(ge=0, le=0.5, description="Standard deviation of a GPU's relative speed.")
    source: str = ""
    exclude_slowest: float = Field(0.0, ge=0, lt=1, description="Share of the slowest GPUs excluded, [0, 1).")


class Reliability(Schema):
    """A reliability profile: failure classes, restart, checkpoint and stragglers."""

    name: str = Field(min_length=1)
    description: str = ""
    failures: list[FailureClass] = Field(default_factory=list)
    restart: Restart
    checkpoint: Checkpoint
    stragglers: Stragglers

    @model_validator(mode="after")
    def _distinct(self) -> Reliability:
        seen = [f.component for f in self.failures]
        if len(seen) != len(set(seen)):
            raise ValueError(f"failure components must be distinct; given {', '.join(seen)}")
        return self

    def with_interval(self, interval_s: float | None) -> Reliability:
        """The profile with the checkpoint interval `interval_s` (None: keep the profile's)."""
        if interval_s is None:
            return self
        interval_s = positive_number(interval_s, "checkpoint_interval", "seconds between checkpoints")
        checkpoint = self.checkpoint.model_copy(update={"interval_s": float(interval_s)})
        return self.model_copy(update={"checkpoint": checkpoint})


@cache
def _catalog() -> dict:
    text = resources.files("madmax.catalog").joinpath("reliability.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    return {"default": data["default"], "stacks": data["profiles"]}


def reliability_names() -> list[str]:
    """Names of the catalog's reliability profiles, the default first."""
    return [entry["name"] for entry in _catalog()["stacks"]]


def load_reliability(spec: str | Path | dict | Reliability | None = None) -> Reliability:
    """A reliability profile: a catalog name (None: the default), a Reliability, a mapping or a YAML/JSON file."""
    from madmax.config.loaders import load_profile_entry

    found = load_profile_entry(Reliability, spec, _catalog(), "reliability")
    if found is None:
        raise ConfigError(f"reliability {str(spec)!r} is neither a catalog profile nor a file{path_rule(spec)}; "
                          f"allowed: {', '.join(reliability_names())} or a YAML file")
    return found
