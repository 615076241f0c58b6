"""Data only: GPUs, systems, models and calibrated efficiency tables, each number with its source."""
