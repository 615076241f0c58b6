"""Cost models: compute roofline with measured efficiency, collectives, memory-bound kernels.

Efficiencies are data (`madmax/catalog/efficiency.yaml` and the fitted compute profile in
`madmax/catalog/calibration/`), never constants in this code.
"""

from madmax.hardware.collectives import Collective, NetworkModel, Span, network_model
from madmax.hardware.compute import ComputeModel, compute_model

__all__ = ["Collective", "ComputeModel", "NetworkModel", "Span", "compute_model", "network_model"]
