"""Errors a user can cause. Each carries one sentence naming the field, the value and what is allowed.

The CLI turns any `MadmaxError` into that sentence on stderr and exit status 2; library callers catch
`MadmaxError`. Internal invariants use `assert`, never these classes.
"""


class MadmaxError(Exception):
    """Bad input: an unknown name, an impossible strategy, a malformed file, a size out of range."""


class ConfigError(MadmaxError):
    """A model, system, task or calibration description is malformed or out of range."""


class CatalogError(MadmaxError):
    """A name is neither in the catalog nor a readable file."""


class StrategyError(MadmaxError):
    """A parallelization strategy is impossible for this model and cluster."""
