"""The rule for fits (docs/calibration.md), checked over the shipped calibration files and
catalog/calibration/fits.yaml.

A constant is adopted only if its cross-source error improves; it is fitted on kernel- or collective-level data
where such data exists; it is never applied beyond the range it was fitted on without a stated physical reason.
"""

from __future__ import annotations

import yaml

from madmax.hardware.profile import catalog_path
from madmax.validate.datasets import LOADERS, load_datasets
from madmax.validate.fits import applies, load_fits

PROVENANCE_KEYS = ("launch_fit", "call_fit", "fit", "fit_errors")  # a calibration file that records a fit


def _calibration_files() -> dict[str, dict]:
    folder = catalog_path("calibration")
    return {f"calibration/{p.name}": yaml.safe_load(p.read_text(encoding="utf-8"))
            for p in sorted(folder.glob("*.yaml")) if p.name != "fits.yaml"}


def test_every_calibration_file_with_a_fit_is_registered():
    registered = {f.file for f in load_fits().fits}
    fitted = {name for name, table in _calibration_files().items()
              if any(table.get(k) for k in PROVENANCE_KEYS)}
    assert fitted, "the shipped profiles record their fits"
    assert fitted <= registered, f"fits without an entry in fits.yaml: {sorted(fitted - registered)}"
    for f in load_fits().fits:
        assert catalog_path(f.file).is_file(), f.file
        if f.prior is not None and f.prior.profile:
            assert catalog_path(f.prior.profile).is_file(), f.prior.profile


def test_sources_cover_every_shipped_dataset_once():
    registry = load_fits()
    owners = [name for s in registry.sources.values() for name in s.datasets]
    assert sorted(owners) == sorted(LOADERS)
    for f in registry.fits:
        assert set(f.sources) <= set(registry.sources), f.name


def test_end_to_end_fits_say_why_no_kernel_data_and_where_they_apply():
    for f in load_fits().fits:
        assert f.range and f.what and f.data, f.name
        if f.level != "end-to-end":
            assert not f.sources, f"{f.name}: kernel and collective data are not validation sources"
            continue
        assert f.sources and f.kernel_data, f"{f.name}: an end-to-end fit names its sources and why no kernel data"
        confined = any(v is not None for v in f.applies_to.model_dump().values())
        assert confined or f.beyond_range, f"{f.name}: applied everywhere without a physical reason"
        if not f.adopted:
            assert f.not_adopted and f.with_it is not None, f"{f.name}: a fit not adopted says why, and how to apply it"


def test_adopted_fits_reach_other_sources_only_where_their_effect_is_measured():
    """An adopted end-to-end fit that applies to another source's rows has a prior (validate measures its
    effect there, 'Each fit, in-sample and cross-source'), or says what is unmeasured."""
    registry = load_fits()
    datasets = load_datasets()
    for f in registry.fits:
        if f.level != "end-to-end" or not f.adopted:
            continue
        reached = {d.name for d in datasets if registry.source_of(d.name) not in f.sources
                   and any(applies(f, c.kwargs) for c in d.cases)}
        if reached:
            assert f.prior is not None or f.unmeasured, f"{f.name} reaches {sorted(reached)} unmeasured"


def test_the_not_adopted_wgrad_rate_is_the_files():
    """The override that shows the fp8 wgrad fit's effect is the fitted value on record, not a copy that drifts."""
    (fit,) = [f for f in load_fits().fits if f.name == "fp8_wgrad"]
    table = yaml.safe_load(catalog_path(fit.file).read_text(encoding="utf-8"))
    assert fit.with_it.wgrad_fraction == table["wgrad_fraction"]
    assert table["adopted"] is fit.adopted is False
