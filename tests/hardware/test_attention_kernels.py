"""Attention kernels by architecture: the table is its points' regeneration, its rules by hand, a kernel's time by
hand, each stack's kernel, the fallback where a kernel has no timings, and bad kernel names."""

import numpy as np
import pytest

from madmax.config.base import DType
from madmax.config.hardware import Architecture
from madmax.config.loaders import load_gpu
from madmax.config.stack import load_stack
from madmax.config.training_stack import load_training_stack
from madmax.errors import ConfigError
from madmax.hardware.attention_fit import fit_panel, load_points, panels, render
from madmax.hardware.attention_kernels import KERNELS_FILE, kernel_curves, kernel_table
from madmax.hardware.compute import compute_model
from madmax.hardware.profile import catalog_path

BF16 = DType.BF16
H100, A100, B200 = load_gpu("h100-sxm"), load_gpu("a100-80gb"), load_gpu("b200")


def test_the_table_is_the_regeneration_of_its_points():
    # `python -m madmax.hardware.attention_fit --write` rewrites it; a hand edit or a changed point fails here
    assert catalog_path(KERNELS_FILE).read_text(encoding="utf-8") == render()


def test_causal_backward_rule_by_hand():
    # FlashAttention-2 on H100 at 512 keys: unmasked backward 214, causal / unmasked forward 191 / 309 TFLOP/s,
    # so the causal backward runs at 214 * 191 / 309 = 132.28 TFLOP/s = 0.133751 of 989
    entry = panels(load_points())[("fa2", "hopper")]
    fraction, derived = entry["panels"][("backward", "causal")]
    assert derived and fraction[0] == pytest.approx(214 * 191 / 309 / 989, rel=1e-12)
    assert not entry["panels"][("forward", "causal")][1]


def test_scaled_from_rule_by_hand():
    # A100's FlashAttention-2: H100's panels times (230/312) / (370/989) = 1.970462; the unmasked forward at
    # 16K keys, 370/989 of H100's peak, becomes 230/312 of A100's
    hopper, ampere = (panels(load_points())[("fa2", arch)] for arch in ("hopper", "ampere"))
    assert ampere["scaled"][1] == pytest.approx(230 / 312 / (370 / 989), rel=1e-12)
    assert ampere["panels"][("forward", "full")][0][-1] == pytest.approx(230 / 312, rel=1e-12)
    assert all(derived for _, derived in ampere["panels"].values())
    assert np.allclose(ampere["panels"][("backward", "full")][0], hopper["panels"][("backward", "full")][0] * 1.970462,
                       rtol=1e-6)


def test_fit_recovers_a_curve_it_generated():
    # points on e = 0.5 kv / (kv + 700) are fitted back to (0.5, 700)
    kv = np.array([512.0, 1024, 2048, 4096, 8192, 16384])
    e, kv0 = fit_panel(kv, 0.5 * kv / (kv + 700))
    assert e == pytest.approx(0.5, rel=1e-5) and kv0 == pytest.approx(700, rel=1e-4)


def test_fa2_on_h100_by_hand():
    # Causal, b=1, h=32, s=8192, d=128: F = 4 * 32 * 128 * 8192^2 / 2 = 5.4975581e11 FLOP.
    # fa2 on hopper (attention_kernels.yaml): forward causal e_max 0.3544, kv0 403.161; backward causal (derived)
    # e_max 0.313572, kv0 659.015; P = 989e12 FLOP/s (h100-sxm bf16).
    # forward:  F * (8192 + 403.161) / 8192 / (989e12 * 0.3544) = 1.645674e-3 s (335.9 TFLOP/s)
    # backward: 2.5 F * (8192 + 659.015) / 8192 / (989e12 * 0.313572) = 4.788279e-3 s
    # (HBM: 2 B * 2 * 128 * (32 + 32) * 8192 = 268 MB in 85 us; launch 22 us: compute-bound)
    curves = kernel_curves("fa2", Architecture.HOPPER)
    assert (curves.forward.causal.peak_fraction, curves.forward.causal.kv0) == (0.3544, 403.161)
    assert (curves.backward.causal.peak_fraction, curves.backward.causal.kv0) == (0.313572, 659.015)
    model = compute_model(H100, attention_kernel="fa2")
    shape = (1, 32, 32, 8192, 8192, 128, True, BF16)
    assert model.attention_s(*shape) == pytest.approx(1.645674e-3, rel=1e-6)
    assert model.attention_s(*shape, backward=True) == pytest.approx(4.788279e-3, rel=1e-6)
    # the profile's curve (torch 2.11 SDPA on an H200, a cuDNN kernel) is 1.8x faster at this shape
    assert compute_model(H100).attention_s(*shape) < model.attention_s(*shape) / 1.7


def test_causal_and_unmasked_curves_differ_and_unfused_attention_keeps_the_profile():
    fa3 = compute_model(H100, attention_kernel="fa3")
    # unmasked forward at 16K keys, b=1, h=16: e = 0.676686 * 16384 / (16384 + 209.061); the profile has one curve
    full = fa3.attention_s(1, 16, 16, 16384, 16384, 128, False, BF16)
    flops = 4 * 16 * 128 * 16384**2
    c = kernel_curves("fa3", Architecture.HOPPER).forward.full
    assert full == pytest.approx(flops * (16384 + c.kv0) / 16384 / (989e12 * c.peak_fraction), rel=1e-9)
    # an unfused attention (scores kept) is costed as before, with the profile's curve
    plain = compute_model(H100)
    assert fa3.attention_s(2, 16, 16, 2048, 2048, 128, False, BF16, backward=True, scores_saved=True) == \
        plain.attention_s(2, 16, 16, 2048, 2048, 128, False, BF16, backward=True, scores_saved=True)


def test_each_stack_names_its_kernel():
    # Transformer Engine's cuDNN attention on Hopper is the profile's own kernel (newer cuDNN than the 9.1 curves)
    assert load_training_stack("megatron-core").attention_kernel(Architecture.HOPPER) is None
    assert load_training_stack("megatron-core").attention_kernel(Architecture.AMPERE) == "fa2"
    assert load_training_stack("fsdp2").attention_kernel(Architecture.HOPPER) == "fa2"
    assert load_training_stack("fsdp2").attention_kernel(Architecture.BLACKWELL) == "cudnn"
    assert load_training_stack("pytorch").attention_kernel(Architecture.HOPPER) == "fa2"
    assert load_training_stack("megatron-lm-2021").attention_kernel(Architecture.AMPERE) is None
    assert load_stack("vllm").attention_kernel(Architecture.HOPPER) == "fa3"
    assert load_stack("sglang").attention_kernel(Architecture.HOPPER) == "fa3"
    assert load_stack("vllm").attention_kernel(Architecture.BLACKWELL) is None
    assert load_training_stack("fsdp2").attention_kernel(None) is None  # a GPU with no architecture


def test_a_kernel_without_timings_falls_back_to_the_profile_and_says_so():
    # fa2 has no Blackwell panel: the profile's curve, and a note; no kernel named: the profile's curve too, and
    # a note that it was measured on another architecture (none on the profile's own, hopper)
    fallback, plain = compute_model(B200, attention_kernel="fa2"), compute_model(B200)
    shape = (1, 32, 8, 4096, 4096, 128, True, BF16)
    assert fallback.attention_s(*shape) == plain.attention_s(*shape)
    (note,) = fallback.attention_notes
    assert "fa2 has no published timings on the blackwell architecture" in note
    (note,) = plain.attention_notes
    assert "measured on hopper (NVIDIA H200" in note and "of this blackwell GPU's peak" in note
    assert compute_model(H100).attention_notes == ()
    nameless = H100.model_copy(update={"name": "my-gpu", "architecture": None})
    (note,) = compute_model(nameless, attention_kernel="fa3").attention_notes
    assert "gpu my-gpu, which names no architecture" in note
    assert "kernel fa3 on hopper" in compute_model(H100, attention_kernel="fa3").attention_notes[0]


def test_kernels_are_cached_apart():
    assert compute_model(H100, attention_kernel="fa2") is compute_model(H100, attention_kernel="fa2")
    assert compute_model(H100, attention_kernel="fa2") is not compute_model(H100, attention_kernel="fa3")
    assert compute_model(H100) is not compute_model(H100.model_copy(update={"architecture": None}))


def test_unknown_kernel_is_one_sentence():
    with pytest.raises(ConfigError, match=r"attention_kernel='fa9' is unknown; allowed: cudnn, fa2, fa3"):
        compute_model(H100, attention_kernel="fa9")


@pytest.mark.parametrize("loader", [load_training_stack, load_stack])
def test_a_bad_kernel_name_in_a_stack_file_is_one_line(tmp_path, loader):
    base = loader(None).model_dump(mode="json")
    path = tmp_path / "stack.yaml"
    path.write_text(__import__("yaml").safe_dump({**base, "attention_kernels": {"hopper": "fa9"}}))
    with pytest.raises(ConfigError) as err:
        loader(str(path))
    message = str(err.value)
    assert "\n" not in message
    assert message == ("stack.attention_kernels.hopper='fa9': unknown attention kernel; allowed: cudnn, fa2, fa3, "
                       "flashinfer, trtllm-fmha")
    path.write_text(__import__("yaml").safe_dump({**base, "attention_kernels": {"hoper": "fa2"}}))
    with pytest.raises(ConfigError, match=r"stack.attention_kernels.hoper"):
        loader(str(path))


def test_every_kernel_with_timings_is_slower_than_its_peak_and_rises_with_keys():
    for kernel in kernel_table().kernels.values():
        for curves in kernel.architectures.values():
            for masks in (curves.forward, curves.backward):
                for c in (masks.causal, masks.full):
                    assert 0 < c.peak_fraction < 1 and c.kv0 > 0 and c.max_error < 0.1
