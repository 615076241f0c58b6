"""Errors a user can cause. Each carries one sentence naming the field, the value and what is allowed.

The CLI turns any `MadmaxError` into that sentence on stderr and exit status 2; library callers catch
`MadmaxError`. Internal invariants use `assert`, never these classes.
"""


class MadmaxError(Exception):
    """Bad input: an unknown name, an impossible strategy, a malformed file, a size out of range.

    Its text is one line: a line break that a quoted input carries into the message is shown as a space,
    so the CLI's one-sentence error stays one line."""

    def __str__(self) -> str:
        return " ".join(super().__str__().splitlines())


class ConfigError(MadmaxError):
    """A model, system, task or calibration description is malformed or out of range."""


class CatalogError(MadmaxError):
    """A name is neither in the catalog nor a readable file."""


class StrategyError(MadmaxError):
    """A parallelization strategy is impossible for this model and cluster."""
