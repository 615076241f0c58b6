"""Measure this machine for `madmax calibrate`: kernel times (`madmax bench gpu`) and collective bus
bandwidth (`madmax bench comm`). Both need PyTorch (`pip install 'madmax[gpu]'`), imported inside the
functions that use it, so that `madmax` starts without it."""

from madmax.errors import MadmaxError


def import_torch():  # returns the torch module
    """torch, or a MadmaxError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise MadmaxError("madmax bench needs PyTorch, which is not installed; allowed: "
                          "pip install 'madmax[gpu]' (or any torch >= 2.1)") from None
    return torch
