"""The launchers whose command lines madmax prints: each engine's and framework's option for every concept
(tensor-parallel size, token budget, FP8 KV cache, ...) at a named release, with where its source defines it
(catalog launchers.yaml). `madmax.results.launch` builds commands from these and nothing else, so a printed
flag is always one read from the launcher's source."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import Field

from madmax.config.base import Schema
from madmax.errors import ConfigError


class LauncherOption(Schema):
    """One option: its spelling and where the launcher's source defines it."""

    flag: str = Field(description="The option as typed, e.g. '--tensor-parallel-size', or a YAML key path.")
    where: str = Field(description="File and line (or the quoted code) at the launcher's release.")
    note: str = Field("", description="Constraints the builder keeps, other accepted values.")


class Launcher(Schema):
    """An engine or training framework at one release."""

    name: str
    description: str
    version: str = Field(description="The release the options were read from.")
    source: str = Field(description="Repository, tag and file of the options.")
    command: str = Field(description="The command before the options ({placeholders} filled by the builder).")
    command_source: str = ""
    config_file: str = Field("", description="Where options that have no flag go (a YAML file), if anywhere.")
    options: dict[str, LauncherOption]

    def flag(self, concept: str) -> str:
        """The option for `concept`; a concept the table lacks is a defect of the builder, not of the input."""
        try:
            return self.options[concept].flag
        except KeyError:
            raise ConfigError(f"launcher {self.name} {self.version} has no option for {concept!r} in "
                              "catalog launchers.yaml") from None


@cache
def _catalog() -> dict:
    text = resources.files("madmax.catalog").joinpath("launchers.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def launcher(kind: str, name: str) -> Launcher:
    """The launcher `name` of `kind` (training, serving)."""
    entry = _catalog()[kind][name]
    return Launcher.model_validate({"name": name, **entry})


def launcher_names(kind: str) -> list[str]:
    return list(_catalog()[kind])
