"""The checks of docs/numerics.md ("The checks every quantizer passes"), one test per line: the
formats' rounding and saturation, the scaling schemes, the Hadamard transform and
stochastic rounding (line 11, the torchao cross-check, is in test_torchao.py). Expected
values are the specification's numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rcpforge.trainers.precision import quantize
from rcpforge.trainers.precision.formats import round_to_format
from rcpforge.trainers.precision.hadamard import hadamard_last_dim, hadamard_matrix

INF, NAN = float("inf"), float("nan")


def _round(values, fmt):
    return round_to_format(torch.tensor(values, dtype=torch.float32), fmt).tolist()


def test_1_e4m3_round_to_nearest_even_and_saturation():
    got = _round([1.0625, 1.1875, 17, 19, 232, 248, 2**-9, 2**-10, 449, 1e6, INF, -INF], "e4m3")
    assert got == [1.0, 1.25, 16, 20, 224, 256, 2**-9, 0.0, 448, 448, 448, -448]
    assert math.isnan(_round([NAN], "e4m3")[0])


def test_2_e5m2_saturates_because_it_is_clamped_first():
    assert _round([61439, 61440, -61440, 2**-16, 2**-17], "e5m2") == [57344, 57344, -57344, 2**-16, 0.0]
    # what the clamp is for: torch's own cast does not saturate
    assert torch.tensor([61440.0]).to(torch.float8_e5m2).float().isinf().all()


def test_3_e2m1_rounding_saturation_and_max_relative_error():
    got = _round([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 7, -7, -0.75], "e2m1")
    assert got == [0, 1, 1, 2, 2, 4, 4, 6, -6, -1]
    x = torch.linspace(1, 6, 100_001)
    rel = ((round_to_format(x, "e2m1") - x).abs() / x).max().item()
    assert rel == pytest.approx(0.2, abs=1e-4)  # worst at 2.5 -> 2


@pytest.mark.parametrize("fmt,m,bound,lo,hi", [("e4m3", 3, 0.0625, 2**-6, 448), ("e5m2", 2, 0.125, 2**-14, 57344)])
def test_4_relative_error_in_the_normal_range(fmt, m, bound, lo, hi):
    gen = torch.Generator().manual_seed(0)
    x = torch.exp(torch.empty(200_000).uniform_(math.log(lo), math.log(hi), generator=gen))
    rel = ((round_to_format(x, fmt) - x).abs() / x).max().item()
    assert rel <= bound
    # the worst case is half an ulp just above a power of two: 1 / (2^(m+1) + 1),
    # 0.0588 for E4M3 ("about 0.059 measured")
    assert rel == pytest.approx(1 / (2 ** (m + 1) + 1), rel=0.01)


def _block(amax: float, n: int = 32) -> torch.Tensor:
    x = torch.full((n,), 0.01)
    x[0] = amax
    return x


@pytest.mark.parametrize("fmt,amax,floor,rceil", [("e4m3", 1.9, 1.75, 1.875), ("e2m1", 7.0, 6.0, 8.0)])
def test_5_mx_floor_saturates_and_rceil_does_not(fmt, amax, floor, rceil):
    assert quantize(_block(amax), fmt, block=32, scale_mode="floor")[0].item() == floor
    assert quantize(_block(amax), fmt, block=32, scale_mode="rceil")[0].item() == rceil
    # RCEIL never exceeds the format's max: the scaled amax stays within it for any amax
    f_max = {"e4m3": 448.0, "e2m1": 6.0}[fmt]
    amaxes = torch.exp(torch.empty(2000).uniform_(-20, 20, generator=torch.Generator().manual_seed(1)))
    x = amaxes[:, None] * torch.cat([torch.ones(2000, 1), torch.rand(2000, 31)], 1)
    q = quantize(x, fmt, block=32, scale_mode="rceil")
    scale = 2.0 ** torch.ceil(torch.log2(amaxes.double() / f_max))
    assert ((q[:, 0].double() / scale) <= f_max).all()
    assert (q[:, 0] >= 0.5 * amaxes).all()  # and nothing collapsed


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_6_tensorwise_amax_round_trips(fmt):
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(2)) * 3
    i = x.abs().argmax()
    q = quantize(x, fmt, block=None)
    assert q.flatten()[i].item() == pytest.approx(x.flatten()[i].item(), rel=1e-6)


def test_7_nvfp4_amax_block_scale_is_448_and_2d_weights_commute():
    from rcpforge.trainers.precision.scaling import nvfp4_block_scale, nvfp4_global_scale

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    x[5, 37] = 9.5
    s_g = nvfp4_global_scale(x.abs().amax())
    s_b = nvfp4_block_scale(x.abs().view(8, 4, 16).amax(-1), s_g, clamp=False)
    assert s_g == pytest.approx(9.5 / 2688)
    assert s_b[5, 2].item() == 448.0
    q = quantize(x, "e2m1", block=16, scale_mode="nvfp4")
    assert q[5, 37].item() == pytest.approx(9.5, rel=2**-22)
    w = torch.randn(48, 80, generator=torch.Generator().manual_seed(4))
    qw = quantize(w, "e2m1", block=(16, 16), scale_mode="nvfp4")
    assert torch.equal(qw.t(), quantize(w.t().contiguous(), "e2m1", block=(16, 16), scale_mode="nvfp4"))
    # the 1-D variant does not commute: the test above can fail
    q1 = quantize(w, "e2m1", block=16, scale_mode="nvfp4")
    assert not torch.equal(q1.t(), quantize(w.t().contiguous(), "e2m1", block=16, scale_mode="nvfp4"))


def test_7b_nvfp4_scale_clamp_shows_with_one_dominating_outlier():
    x = torch.zeros(2, 16)
    x[0, 0] = 1e4  # the global amax: the second block's scale goes subnormal in E4M3
    s_g = 1e4 / (448 * 6)
    a = 6 * s_g * 2.0**-8  # block amax whose E4M3 block scale is exactly 2^-8
    x[1, 0], x[1, 1] = a, 0.1 * a
    te = quantize(x, "e2m1", block=16, scale_mode="nvfp4")
    ao = quantize(x, "e2m1", block=16, scale_mode="nvfp4_clamped")
    assert te[1, 0].item() == pytest.approx(a, rel=1e-6) and ao[1, 0].item() == pytest.approx(a, rel=1e-6)
    # 0.1 a is 0.6 in units of the subnormal scale (-> 0.5), but 0.15 under 2^-6 (-> 0)
    assert te[1, 1].item() == pytest.approx(0.5 * a / 6, rel=1e-6)
    assert ao[1, 1].item() == 0.0


def test_8_random_hadamard_cancels():
    h = hadamard_matrix(torch.float64)
    assert torch.allclose(h @ h.t(), torch.eye(16, dtype=torch.float64), atol=1e-12)
    assert not torch.equal(h.abs(), h)  # signs are mixed, not a plain Sylvester matrix
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(24, 64, generator=gen, dtype=torch.float64)
    c = torch.randn(40, 64, generator=gen, dtype=torch.float64)
    got = hadamard_last_dim(a) @ hadamard_last_dim(c).t()
    assert (got - a @ c.t()).abs().max().item() < 1e-10
    assert not torch.allclose(hadamard_last_dim(a), a)
    # a length that is not a multiple of 16 is padded, and still cancels
    a, c = a[:, :50], c[:, :50]
    assert (hadamard_last_dim(a) @ hadamard_last_dim(c).t() - a @ c.t()).abs().max().item() < 1e-10


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_9_stochastic_rounding_unbiased_neighbours_seeded(fmt):
    gen = torch.Generator().manual_seed(6)
    grid_max = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}[fmt]
    x = torch.empty(100_000).uniform_(-grid_max / 1.5, grid_max / 1.5, generator=gen)
    q = round_to_format(x, fmt, "sr", torch.Generator().manual_seed(7))
    # neighbours: the RNE grid points just below and above (rounding toward 0 / away)
    grid = torch.unique(round_to_format(torch.linspace(-grid_max, grid_max, 2_000_001), fmt))
    idx = torch.searchsorted(grid, x)
    lo, hi = grid[(idx - 1).clamp(min=0)], grid[idx.clamp(max=len(grid) - 1)]
    exact = grid[idx.clamp(max=len(grid) - 1)] == x
    assert ((q == lo) | (q == hi) | exact).all()
    assert torch.isin(q, grid).all()
    ulp = hi - lo
    assert ((q - x) / torch.where(ulp > 0, ulp, 1)).mean().abs().item() < 0.01
    again = round_to_format(x, fmt, "sr", torch.Generator().manual_seed(7))
    assert torch.equal(q, again)
    assert torch.equal(quantize(x, fmt, block=16, rounding="sr", seed=3), quantize(x, fmt, block=16, rounding="sr", seed=3))
    assert not torch.equal(quantize(x, fmt, block=16, rounding="sr", seed=3), quantize(x, fmt, block=16, rounding="sr", seed=4))


def test_9b_stochastic_rounding_mean_error_on_constant_input():
    x = torch.full((100_000,), 1.3)
    q = round_to_format(x, "e2m1", "sr", torch.Generator().manual_seed(0))
    assert sorted(q.unique().tolist()) == [1.0, 1.5]
    assert abs(q.mean().item() - 1.3) < 0.01


CASES = [
    ("e4m3", None, "fp32"), ("e5m2", None, "pow2"), ("e4m3", 128, "fp32"), ("e4m3", (128, 128), "fp32"),
    ("e4m3", 32, "floor"), ("e4m3", 32, "rceil"), ("e2m1", 32, "floor"), ("e2m1", 32, "rceil"),
    ("e2m1", 16, "nvfp4"), ("e2m1", (16, 16), "nvfp4"), ("e2m1", 16, "nvfp4_clamped"),
]


@pytest.mark.parametrize("fmt,block,mode", CASES)
@pytest.mark.parametrize("special", [0.0, INF, NAN])
def test_10_degenerate_amax_gives_no_nan_from_finite_inputs(fmt, block, mode, special):
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(8))
    x[:4] = 0.0  # whole blocks (and tiles) of zeros
    if special != 0.0:
        x[10, 3] = special  # a non-finite value sets its block's, and the tensor's, amax
    q = quantize(x, fmt, block=block, scale_mode=mode)
    finite = torch.isfinite(x)
    assert not torch.isnan(q[finite]).any()
    assert torch.equal(q[:4], torch.zeros(4, 256))
    assert torch.equal(quantize(torch.zeros(3, 64), fmt, block=block if block != (128, 128) else (16, 16),
                                scale_mode=mode), torch.zeros(3, 64))
