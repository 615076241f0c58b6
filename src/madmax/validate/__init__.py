"""Validation of predictions against measured training runs: datasets, error statistics, reports."""

from madmax.validate.datasets import Case, Dataset, Unmapped, load_datasets
from madmax.validate.runner import Report, RowResult, run_validation
from madmax.validate.trust import error_band

__all__ = ["Case", "Dataset", "Report", "RowResult", "Unmapped", "error_band", "load_datasets", "run_validation"]
