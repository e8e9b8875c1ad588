"""The FP8 tensorwise path of the spine (NUMERICS.md conformance lines 1, 2, 6, 10)."""

from __future__ import annotations

import pytest
import torch

from trainers.precision.formats import cast_saturating, fake_quant_tensorwise
from trainers.precision.linear import linear_for
from trainers.recipes import get_recipe


def _cast(values, fmt):
    return cast_saturating(torch.tensor(values, dtype=torch.float32), fmt).tolist()


def test_e4m3_round_to_nearest_even_and_saturation():
    got = _cast([1.0625, 1.1875, 17, 19, 232, 248, 2**-9, 2**-10, 449, 1e6, float("inf")], "e4m3")
    assert got == [1.0, 1.25, 16, 20, 224, 256, 2**-9, 0.0, 448, 448, 448]
    assert torch.isnan(cast_saturating(torch.tensor([float("nan")]), "e4m3")).all()


def test_e5m2_clamps_before_the_cast():
    assert _cast([61439, 61440, 2**-16, 2**-17], "e5m2") == [57344, 57344, 2**-16, 0.0]


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_tensorwise_amax_round_trips_and_degenerate_amax_is_safe(fmt):
    x = torch.randn(64, 64) * 3
    q = fake_quant_tensorwise(x, fmt)
    i = x.abs().argmax()
    assert q.flatten()[i] == pytest.approx(float(x.flatten()[i]), rel=1e-6)
    assert torch.equal(fake_quant_tensorwise(torch.zeros(4), fmt), torch.zeros(4))
    with_inf = torch.tensor([1.0, float("inf"), -2.0])
    out = fake_quant_tensorwise(with_inf, fmt)
    assert torch.isfinite(out[[0, 2]]).all()


def test_quantized_linear_gradients_match_float64_within_fp8_error():
    torch.manual_seed(0)
    x = torch.randn(32, 64, requires_grad=True)
    w = torch.randn(48, 64, requires_grad=True)
    b = torch.randn(48, requires_grad=True)
    dy = torch.randn(32, 48)
    fn = linear_for(get_recipe("fp8_tensorwise"))
    fn(x, w, b).backward(dy)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    torch.nn.functional.linear(xd, wd, bd).backward(dy.double())

    def rel(a, ref):
        return float((a.double() - ref).norm() / ref.norm())

    # E4M3 operands carry ~2^-4 relative error, E5M2 gradients ~2^-3: errors average out in a GEMM
    assert rel(x.grad, xd.grad) < 0.06 and rel(w.grad, wd.grad) < 0.06
    assert rel(b.grad, bd.grad) < 1e-6  # the bias gradient is not quantized
    assert rel(x.grad, xd.grad) > 1e-4  # and the others really are
