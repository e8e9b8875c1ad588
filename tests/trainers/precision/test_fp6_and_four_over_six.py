"""The formats and recipes added in 2026: the 4-over-6 conventions (the error that picks a block's
candidate and the global scale's E4M3 max) against a direct implementation of each, the
property that holds at 448 and the one at 256; TransformerEngine's 4over6 with its
constraints; MXFP6's element formats E2M3 and E3M2 at known points of the OCP MX v1.0
spec and bit for bit against torchao's MX FP6 casts; the named mxfp6 and mxfp4_dethad16."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from rcpforge.trainers.precision import kernels, quantize
from rcpforge.trainers.precision.formats import round_to_format
from rcpforge.trainers.precision.hadamard import hadamard_last_dim, hadamard_matrix
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.precision.quantize import fake_quant_factored
from rcpforge.trainers.recipes.config import RecipeError, same_gemms
from rcpforge.trainers.recipes.operands import FOUR_OVER_SIX
from rcpforge.trainers.recipes.resolve import resolve_recipe, validate_recipe_options
from rcpforge.trainers.recipes.written import validate_written
from rcpforge.trainers.tinylm.precision_map import disclosed_precisions, precision_map
from tests.trainers.precision.test_new_recipes import _blocks, _same_bits, ref_4over6
from tests.trainers.precision.test_qkernel import _data as _spread
from tests.trainers.precision.test_qkernel import _same

# --- 1. the 4-over-6 conventions -------------------------------------------------------


@pytest.mark.parametrize("mode", list(FOUR_OVER_SIX))
@pytest.mark.parametrize("tile", [16, (16, 16)], ids=["1x16", "16x16"])
def test_each_4over6_convention_equals_its_direct_implementation(mode, tile):
    error, top = FOUR_OVER_SIX[mode]
    x = _blocks(512, seed=21)[:64]
    x[5] = 0.0  # a row of zero blocks
    got = quantize(x, "e2m1", block=tile, scale_mode=mode)
    assert _same_bits(got, ref_4over6(x, tile, error, top))
    # the conventions differ from each other on these 256 blocks (each option does something)
    if isinstance(tile, int):
        others = [quantize(x, "e2m1", block=tile, scale_mode=m) for m in FOUR_OVER_SIX if m != mode]
        assert all(not torch.equal(got, o) for o in others)


def test_the_options_pick_the_conventions_and_the_default_is_unchanged():
    assert resolve_recipe("nvfp4_4over6").x.scale_mode == "nvfp4_4over6"
    assert validate_recipe_options("nvfp4_4over6", {}) == validate_recipe_options(
        "nvfp4_4over6", {"error": "mse", "global_scale_max": 448})  # at the defaults: not in the run key
    assert "error" not in validate_recipe_options("nvfp4_4over6", {})
    for (error, top), mode in zip(FOUR_OVER_SIX.values(), FOUR_OVER_SIX, strict=True):
        r = resolve_recipe("nvfp4_4over6", {"error": error, "global_scale_max": top})
        assert {r.x.scale_mode, r.w.scale_mode, r.dy.scale_mode} == {mode}
        assert r.w.block == (16, 16) and r.dy.rounding == "sr" and r.hadamard_wgrad  # the rest as before
    with pytest.raises(RecipeError, match="global_scale_max"):
        validate_recipe_options("nvfp4_4over6", {"global_scale_max": 384})
    with pytest.raises(RecipeError, match="error"):
        validate_recipe_options("nvfp4_4over6", {"error": "max"})


@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("tile", [16, (16, 16)], ids=["1x16", "16x16"])
def test_4over6_mae_at_448_never_has_more_block_mae_than_plain_nvfp4(tile, rounding):
    """At 448 the 6-candidate is plain NVFP4 bit for bit, so picking by absolute error
    never leaves a block with a larger absolute error than plain NVFP4's (with SR, the
    same draws), and lowers it on many."""
    x = _blocks(4096, seed=22)
    kw = {"block": tile, "rounding": rounding, "seed": 4 if rounding == "sr" else None}
    plain = quantize(x, "e2m1", scale_mode="nvfp4", **kw)
    mae = quantize(x, "e2m1", scale_mode="nvfp4_4over6_mae", **kw)

    def block_mae(q):
        e = (q.double() - x.double()).abs()
        if isinstance(tile, tuple):
            return e.reshape(x.shape[0] // 16, 16, x.shape[1] // 16, 16).sum((1, 3))
        return e.reshape(x.shape[0], -1, 16).sum(-1)

    e_plain, e_mae = block_mae(plain), block_mae(mae)
    assert (e_mae <= e_plain).all()
    assert (e_mae < e_plain).float().mean() > 0.05


def test_at_256_the_4_candidate_never_saturates_and_the_6_candidate_is_not_plain_nvfp4():
    """A block holding the tensor's amax 6 whose values are exact under the scale that
    maps 6 to 4: at 256, s_g = 6/1536 = 2^-8, the 4-candidate's block scale 384 fits
    E4M3 and the block comes back exactly (4, 3, 2, 1.5, 1, 0.5 on the grid), whichever
    error picks. At 448 its scale 672 saturates to 448, the 6-candidate's: both are plain
    NVFP4, which rounds 4.5, 2.25 and 0.75 off. Over random blocks the 256 conventions
    are not bounded by plain NVFP4 (their 6-candidate is coarser), but each block keeps
    the better of its own two candidates (the direct implementation test)."""
    x = torch.zeros(2, 16)
    x[0, :6] = torch.tensor([6.0, 4.5, 3.0, 2.25, 1.5, 0.75])
    x[1, :2] = torch.tensor([-0.75, 0.375])
    for mode in ("nvfp4_4over6_256", "nvfp4_4over6_mae_256"):
        assert torch.equal(quantize(x, "e2m1", block=16, scale_mode=mode), x), mode
    for mode in ("nvfp4_4over6", "nvfp4_4over6_mae"):
        got = quantize(x, "e2m1", block=16, scale_mode=mode)
        assert torch.equal(got, quantize(x, "e2m1", block=16, scale_mode="nvfp4"))
        # (s_g = 6/2688 is not a power of two: equal up to its float32 rounding)
        assert torch.allclose(got[0, :6], torch.tensor([6.0, 4.0, 3.0, 2.0, 1.5, 1.0]), rtol=1e-6, atol=0)
    y = _blocks(4096, seed=23)
    plain = quantize(y, "e2m1", block=16, scale_mode="nvfp4")
    at256 = quantize(y, "e2m1", block=16, scale_mode="nvfp4_4over6_256")
    sq = lambda q: ((q.double() - y.double()) ** 2).reshape(y.shape[0], -1, 16).sum(-1)  # noqa: E731
    assert (sq(at256) > sq(plain)).any() and (sq(at256) < sq(plain)).any()


def test_te_4over6_has_te_defaults_and_refuses_hadamard_and_stochastic_rounding():
    te = resolve_recipe("nvfp4_4over6_te")
    assert {te.x.scale_mode, te.w.scale_mode, te.dy.scale_mode} == {"nvfp4_4over6_mae_256"}
    assert te.dy.rounding == "rne" and not te.hadamard_wgrad and te.w.block == (16, 16)
    same = resolve_recipe("nvfp4_4over6", {"error": "mae", "global_scale_max": 256, "hadamard": False,
                                           "stochastic_rounding": False})
    assert same_gemms(te, same) and not same_gemms(te, resolve_recipe("nvfp4_4over6"))
    for option in ("hadamard", "stochastic_rounding"):  # not options of its: asked for, refused
        assert option not in validate_recipe_options("nvfp4_4over6_te", {})
        with pytest.raises(RecipeError, match=f"options: {option}: TransformerEngine.s 4over6 runs without"):
            validate_recipe_options("nvfp4_4over6_te", {option: True})
    # options off TE's defaults survive the round trip through the normalized options
    opts = validate_recipe_options("nvfp4_4over6_te", {"error": "mse", "global_scale_max": 448})
    assert resolve_recipe("nvfp4_4over6_te", opts).x.scale_mode == "nvfp4_4over6"
    assert "TE#2972" in te.description and "rcpforge's own" in resolve_recipe("nvfp4_4over6").description
    assert "TransformerEngine's 4over6)" not in resolve_recipe("nvfp4_4over6").description


@pytest.mark.parametrize("mode", [m for m in FOUR_OVER_SIX if m != "nvfp4_4over6"])  # test_qkernel has it
@pytest.mark.parametrize("tile", [16, (16, 16)], ids=["1x16", "16x16"])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("shape", [(48, 64), (37, 50), (2, 4352)])  # whole blocks, cut blocks, long rows
def test_4over6_conventions_on_the_fused_kernel_equal_the_torch_path(mode, tile, rounding, shape):
    x = _spread(shape, seed=hash((mode, str(tile), rounding, shape)) % 2**31)
    x[:, 5:9] = x[:, :4] * 0.75  # some blocks whose 4-candidate is exact
    assert kernels.available()
    runs = []
    for fused in (True, False):
        old = kernels.set_enabled(fused)
        try:
            runs.append(fake_quant_factored(x, "e2m1", tile, mode, rounding, torch.Generator().manual_seed(3))[0])
        finally:
            kernels.set_enabled(old)
    assert _same(runs[0].dequant(), runs[1].dequant())
    assert _same(runs[0].core, runs[1].core) and runs[0].multiplier == runs[1].multiplier


@pytest.mark.parametrize("mode", [*FOUR_OVER_SIX, "nvfp4_rowscaled"])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_a_transposed_copy_takes_the_fused_kernel_with_the_torch_paths_bits(mode, rounding, monkeypatch):
    """nvfp4_4over6_te's wgrad copies of x and dY are transposed views (no Hadamard makes
    them contiguous): the kernel takes a contiguous copy, as the torch path does."""
    x = _spread((64, 48), seed=9).t()
    runs, calls = [], []
    real = kernels.fused_quantize
    monkeypatch.setattr(kernels, "fused_quantize", lambda *a, **k: calls.append(1) or real(*a, **k))
    for fused in (True, False):
        old = kernels.set_enabled(fused)
        try:
            runs.append(fake_quant_factored(x, "e2m1", 16, mode, rounding, torch.Generator().manual_seed(3))[0])
        finally:
            kernels.set_enabled(old)
    assert calls == [1]  # the fused run used the kernel, the torch run did not
    assert _same(runs[0].dequant(), runs[1].dequant())


def test_the_4over6_conventions_in_a_written_recipe():
    nv = {"format": "e2m1", "scaling": "nvfp4", "block": 16, "scale": "nvfp4_4over6_mae_256"}
    d = validate_written("my_te", {"x": nv, "w": {**nv, "block": None, "tile": [16, 16]}, "dy": nv})
    mine = resolve_recipe("my_te", d)
    assert same_gemms(mine, resolve_recipe("nvfp4_4over6_te"))


# --- 2. MXFP6 ------------------------------------------------------------------------


def _fp6_values(ebits: int, mbits: int) -> list[float]:
    """Every non-negative value of an OCP MX FP6 format from its bit fields (bias
    2^(ebits-1) - 1, subnormals at exponent 0, no inf or NaN codes)."""
    bias = 2 ** (ebits - 1) - 1
    out = []
    for e, m in itertools.product(range(2**ebits), range(2**mbits)):
        out.append((m / 2**mbits) * 2.0 ** (1 - bias) if e == 0 else (1 + m / 2**mbits) * 2.0 ** (e - bias))
    return out


@pytest.mark.parametrize("fmt,ebits,mbits,spec", [
    # OCP MX v1.0, table of the FP6 formats: max normal, min normal, max and min subnormal
    ("e2m3", 2, 3, (7.5, 1.0, 0.875, 0.125)),
    ("e3m2", 3, 2, (28.0, 0.25, 0.1875, 0.0625)),
])
def test_fp6_element_formats_at_the_ocp_spec_points(fmt, ebits, mbits, spec):
    values = _fp6_values(ebits, mbits)
    assert (max(values), min(v for v in values[2**mbits:]), max(values[:2**mbits]),
            min(v for v in values if v > 0)) == spec
    grid = torch.tensor(values)
    assert torch.equal(round_to_format(grid, fmt), grid) and torch.equal(round_to_format(-grid, fmt), -grid)
    # midpoints round to the even mantissa; beyond the max saturates; below half the
    # smallest subnormal flushes to zero
    mids = (grid[1:] + grid[:-1]) / 2
    even = torch.tensor([i % 2 == 0 for i in range(len(values))])
    up, down = grid[1:], grid[:-1]
    want = torch.where(even[1:], up, down)
    assert torch.equal(round_to_format(mids, fmt), want)
    assert round_to_format(torch.tensor([1e6, -1e6, spec[3] / 2, spec[3] * 0.51]), fmt).tolist() == [
        spec[0], -spec[0], 0.0, spec[3]]


def test_mxfp6_known_points():
    """E8M0 FLOOR scale 2^(floor(log2 amax) - emax_elem), emax_elem 2 (E2M3) and 4
    (E3M2): a block with amax 15 in E2M3 takes the scale 2 and 15 -> 7.5 -> 15 exactly,
    1.3 -> 0.65 -> 0.625 -> 1.25; amax 30 in E3M2 takes the scale 1 and saturates at 28."""
    x = torch.zeros(2, 32)
    x[0, :2] = torch.tensor([15.0, 1.3])
    x[1, :2] = torch.tensor([30.0, -0.3])
    e2m3 = quantize(x, "e2m3", block=32, scale_mode="floor")
    assert e2m3[0, :2].tolist() == [15.0, 1.25]
    e3m2 = quantize(x, "e3m2", block=32, scale_mode="floor")
    assert e3m2[1, :2].tolist() == [28.0, -0.3125]


try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
        from torchao.prototype.mx_formats.kernels import (
            f6_e2m3_unpacked_to_f32,
            f6_e3m2_unpacked_to_f32,
            f32_to_f6_e2m3_unpacked,
            f32_to_f6_e3m2_unpacked,
        )
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
    _TORCHAO = None
except Exception as err:  # torchao is a test-only extra
    _TORCHAO = f"torchao cannot be imported ({type(err).__name__}: {err}); pip install --no-deps torchao==0.18.0"


def _need_torchao():
    if _TORCHAO is not None:
        from tests.conftest import missing_service

        missing_service(_TORCHAO)


def test_fp6_elements_equal_torchaos_casts_bit_for_bit():
    _need_torchao()
    casts = {"e2m3": (f32_to_f6_e2m3_unpacked, f6_e2m3_unpacked_to_f32),
             "e3m2": (f32_to_f6_e3m2_unpacked, f6_e3m2_unpacked_to_f32)}
    gen = torch.Generator().manual_seed(6)
    # every magnitude from below the subnormals to beyond the max, and exact midpoints
    x = torch.cat([torch.randn(20000, generator=gen) * torch.exp2(torch.empty(20000).uniform_(-8, 6, generator=gen)),
                   torch.arange(-2000, 2001) / 64.0])
    for fmt, (to6, to32) in casts.items():
        ref = to32(to6(x))
        got = round_to_format(x, fmt)
        assert torch.equal(got, ref), fmt


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mxfp6_equals_torchaos_mxtensor_bit_for_bit(mode):
    _need_torchao()
    dtypes = {"e2m3": DTYPE_FP6_E2M3, "e3m2": DTYPE_FP6_E3M2}
    for seed, (fmt, dtype) in itertools.product(range(2), dtypes.items()):
        gen = torch.Generator().manual_seed(seed)
        spread = torch.exp2(torch.empty(1, 512).uniform_(-20, 20, generator=gen))
        x = torch.randn(64, 512, generator=gen) * spread
        ref = MXTensor.to_mx(x, dtype, 32, scaling_mode=getattr(ScaleCalculationMode, mode.upper()))
        got = quantize(x, fmt, block=32, scale_mode=mode)
        assert _same_bits(got, ref.dequantize(torch.float32)), (fmt, mode, seed)


@pytest.mark.parametrize("fmt", ["e2m3", "e3m2"])
@pytest.mark.parametrize("block,mode", [(32, "floor"), (32, "rceil"), (None, "fp32"), (128, "fp32"), (64, "pow2")])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_fp6_fused_kernel_equals_the_torch_path(fmt, block, mode, rounding):
    x = _spread((48, 64), seed=7)
    runs = []
    for fused in (True, False):
        old = kernels.set_enabled(fused)
        try:
            runs.append(fake_quant_factored(x, fmt, block, mode, rounding, torch.Generator().manual_seed(3))[0])
        finally:
            kernels.set_enabled(old)
    assert _same(runs[0].dequant(), runs[1].dequant())


# --- 3. the named mxfp6 and mxfp4_dethad16 -------------------------------------------


def test_mxfp6_recipe_and_its_written_twin():
    r = resolve_recipe("mxfp6")
    assert (r.x.fmt, r.w.fmt, r.dy.fmt) == ("e2m3", "e2m3", "e3m2")
    assert {r.x.scaling, r.w.scaling, r.dy.scaling} == {"mx"} and r.x.block == 32 and not r.hadamard_wgrad
    assert resolve_recipe("mxfp6", {"scale_mode": "rceil"}).dy.scale_mode == "rceil"
    mx = {"scaling": "mx"}
    written = {"x": {"format": "e2m3", **mx}, "w": {"format": "e2m3", **mx}, "dy": {"format": "e3m2", **mx}}
    assert same_gemms(resolve_recipe("my6", validate_recipe_options("my6", written)), r)
    with pytest.raises(RecipeError, match=r"recipes\.bad\.x\.scaling: E2M3 \(FP6\) needs block scales"):
        validate_recipe_options("bad", {**written, "x": {"format": "e2m3"}})
    keys = disclosed_precisions(precision_map(r, 2))
    assert keys["lowest_numerical_precision_in_linear"] == "mxfp6"


def test_mxfp4_dethad16_is_the_16_point_deterministic_hadamard():
    r = resolve_recipe("mxfp4_dethad16")
    h = QuantizedGemm(r).wgrad_hadamard()
    assert h is not None and torch.equal(h, hadamard_matrix(torch.float32, 16, False)) and (h[0] > 0).all()
    assert not same_gemms(r, resolve_recipe("mxfp4_dethad")) and "16-point deterministic" in r.summary()["wgrad"]
    mx4 = {"format": "e2m1", "scaling": "mx"}
    written = {"x": mx4, "w": mx4, "dy": mx4, "wgrad": {"transform": "hadamard", "size": 16, "signs": "none"}}
    assert same_gemms(resolve_recipe("my_dh16", validate_recipe_options("my_dh16", written)), r)
    # the wgrad GEMM on the transformed copies: dW as its oracle, dX as mxfp4's
    gen = torch.Generator().manual_seed(8)
    x, w = torch.randn(64, 96, generator=gen), torch.randn(48, 96, generator=gen)
    dy = torch.randn(64, 48, generator=gen)
    gemm = QuantizedGemm(r)
    xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
    gemm(xl, wl, None).backward(dy)
    mx = lambda t: quantize(t, "e2m1", block=32, scale_mode="floor")  # noqa: E731
    ref_dw = mx(hadamard_last_dim(dy.t().contiguous(), h)) @ mx(hadamard_last_dim(x.t().contiguous(), h)).t()
    assert (wl.grad - ref_dw).norm() / ref_dw.norm() < 3e-3
    plain = QuantizedGemm(resolve_recipe("mxfp4"))
    xp, wp = x.clone().requires_grad_(), w.clone().requires_grad_()
    plain(xp, wp, None).backward(dy)
    assert torch.equal(xp.grad, xl.grad) and not torch.equal(wp.grad, wl.grad)
