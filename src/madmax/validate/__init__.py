"""Validation of predictions against measured training runs: datasets, error statistics, reports."""

from madmax.validate.datasets import Case, Dataset, Unmapped, load_datasets
from madmax.validate.runner import Report, RowResult, run_validation

__all__ = ["Case", "Dataset", "Report", "RowResult", "Unmapped", "load_datasets", "run_validation"]
