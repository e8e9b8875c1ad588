"""The fused CPU quantizer (trainers/precision/qkernel.c) gives the torch path's results
bit for bit in every mode it takes, so a worker without a C compiler changes speed only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from rcpforge.trainers.precision import kernels
from rcpforge.trainers.precision.quantize import fake_quant_factored, quantize_delayed

MODES = [  # (block, scale_mode) as the recipes and the public quantize use them
    (None, "fp32"), (None, "floor"), (None, "pow2"), (None, "nvfp4"),
    (32, "floor"), (32, "rceil"), (20, "floor"),
    (16, "nvfp4"), (16, "nvfp4_clamped"), ((16, 16), "nvfp4"),
    (128, "fp32"), (7, "fp32"), (64, "pow2"), ((128, 128), "fp32"),
    (16, "nvfp4_4over6"), ((16, 16), "nvfp4_4over6"), (16, "nvfp4_rowscaled"),  # issue 17
]


@pytest.fixture
def torch_path():
    """Run the body's `fn` once on each path; restores the setting."""
    def both(fn):
        old = kernels.set_enabled(True)
        try:
            fused = fn()
            kernels.set_enabled(False)
            return fused, fn()
        finally:
            kernels.set_enabled(old)
    return both


def _data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-30, 30, shape, generator=g).float())
    x.view(-1)[::97] = 0.0
    return x


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns, any NaN equal to any NaN."""
    if not torch.equal(a.isnan(), b.isnan()):
        return False
    a, b = a.nan_to_num(nan=0.0), b.nan_to_num(nan=0.0)
    return torch.equal(a.view(torch.int32 if a.dtype == torch.float32 else torch.int16),
                       b.view(torch.int32 if b.dtype == torch.float32 else torch.int16))


def test_the_kernel_builds_on_this_machine():
    # CI installs a C compiler; without the kernel the step-time targets are not met
    assert kernels.available(), "the fused quantizer did not build; see the warning logged"


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("block,mode", MODES)
@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("shape", [(48, 64), (37, 50)])  # a multiple of every block, and not
def test_fused_equals_torch_bit_for_bit(torch_path, fmt, block, mode, rounding, shape):
    x = _data(shape, seed=hash((fmt, str(block), mode, rounding, shape)) % 2**31)

    def run():
        g = torch.Generator().manual_seed(3)
        return fake_quant_factored(x, fmt, block, mode, rounding, g)[0]

    fused, plain = torch_path(run)
    assert _same(fused.dequant(), plain.dequant())
    assert (fused.exact, fused.divisor, fused.multiplier) == (plain.exact, plain.divisor, plain.multiplier)
    for a, b in ((fused.row_div, plain.row_div), (fused.col_div, plain.col_div)):
        assert (a is None and b is None) or _same(a, b)
    if fused.exact:
        assert _same(fused.bf16(), plain.bf16())


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("block,mode", [m for m in MODES if m[1] != "pow2" or m[0] is not None])
@pytest.mark.parametrize("special", [float("nan"), float("inf"), -float("inf"), 1e-40, 3e38, -0.0])
def test_fused_equals_torch_on_special_values(torch_path, fmt, block, mode, special):
    x = _data((32, 64), seed=7)
    x[1, 5] = special
    x[2] = special  # a whole row (a whole block) of it
    fused, plain = torch_path(lambda: fake_quant_factored(x, fmt, block, mode)[0])
    assert _same(fused.dequant(), plain.dequant())
    for a, b in ((fused.divisor, plain.divisor), (fused.multiplier, plain.multiplier)):
        assert a == b or (a != a and b != b)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scale", [1.0, 3.5, 1e-3, 1e30])
@pytest.mark.parametrize("special", [None, float("inf"), float("nan")])
def test_delayed_step_equals_torch(torch_path, fmt, scale, special):
    x = _data((64, 48), seed=11)
    if special is not None:
        x[3, 3] = special
    (fq, famax), (pq, pamax) = torch_path(lambda: quantize_delayed(x, fmt, scale))
    assert _same(fq.dequant(), pq.dequant()) and _same(fq.bf16(), pq.bf16())
    assert famax == pamax or (famax != famax and pamax != pamax)


def test_stochastic_rounding_consumes_the_same_stream(torch_path):
    """After an SR quantization both paths leave the generator in the same state, so
    the next draws (the next step's) agree too."""
    x = _data((32, 64), seed=5)

    def run():
        g = torch.Generator().manual_seed(9)
        fake_quant_factored(x, "e2m1", 16, "nvfp4", "sr", g)
        return torch.rand(4, generator=g)

    fused, plain = torch_path(run)
    assert torch.equal(fused, plain)


@pytest.mark.parametrize("sizes", [
    [2048], [623, 2048, 1, 4096],  # draws that stop before, at and past the 624-word twist
    [(48, 64), (3, 1000), 70000],  # several twists in one draw; shapes
])
def test_kernel_draws_are_torch_rand_bit_for_bit(sizes):
    """Stochastic rounding draws with the kernel's copy of torch's mt19937: the same
    numbers as torch.rand and the generator left in the same state after each draw."""
    assert kernels.available()
    ours, theirs = torch.Generator().manual_seed(41), torch.Generator().manual_seed(41)
    for size in sizes:
        shape = size if isinstance(size, tuple) else (size,)
        got = kernels.uniform(shape, ours)
        assert got.shape == shape and torch.equal(got, torch.rand(shape, generator=theirs))
        assert torch.equal(ours.get_state(), theirs.get_state())
    assert kernels._draws_checked is True  # the kernel drew them, not torch.rand


def test_kernel_draws_on_the_default_generator_advance_it_as_torch_rand():
    with torch.random.fork_rng():
        torch.manual_seed(5)
        got = kernels.uniform((4096,), None)
        after = torch.rand(3)
        torch.manual_seed(5)
        assert torch.equal(got, torch.rand(4096)) and torch.equal(after, torch.rand(3))


def test_a_generator_the_kernel_does_not_reproduce_falls_back_to_torch_rand(monkeypatch, caplog):
    """A torch whose generator changed fails the one check and only draws slower."""
    monkeypatch.setattr(kernels, "_draws_checked", None)
    monkeypatch.setattr(kernels, "_c_uniform", lambda n, g: torch.zeros(n))  # a wrong copy
    ours, theirs = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    got = kernels.uniform((5000,), ours)
    assert torch.equal(got, torch.rand(5000, generator=theirs))
    assert kernels._draws_checked is False and "draws with torch.rand" in caplog.text


def _lanes_of_four(row: list[float]) -> float:
    lanes = row[:4]
    for g in range(4, len(row), 4):
        lanes = [a + b for a, b in zip(lanes, row[g:g + 4], strict=True)]
    return ((lanes[0] + lanes[1]) + lanes[2]) + lanes[3]


def test_4over6_kernel_sums_errors_in_the_order_torch_does():
    """qkernel.c's four_over_six_pick picks a block's candidate by sums of squares added
    in torch's order: a row of 16 into four running sums, those in turn, then the rows
    in turn. On sums whose rounding depends on the order (terms over 80 binades) torch
    must still match that order, or the kernel's choice and the torch path's could
    differ on a near-tie."""
    g = torch.Generator().manual_seed(8)
    terms = torch.randn(40, 16, 30, 16, generator=g, dtype=torch.float64)
    terms = terms.square() * torch.exp2(torch.randint(-40, 40, terms.shape, generator=g).double())
    rows = terms.sum(-1)  # 1-D blocks of 16
    tiles = terms.sum((1, 3))  # 16x16 tiles
    for i in range(40):
        for j in range(30):
            per_row = [_lanes_of_four(terms[i, r, j].tolist()) for r in range(16)]
            assert rows[i, :, j].tolist() == per_row
            total = 0.0
            for v in per_row:
                total += v
            assert tiles[i, j].item() == total
    sequential = sum(rows[0, 0, j].item() == float(sum(terms[0, 0, j].tolist())) for j in range(30))
    assert sequential < 30  # the test data does tell the orders apart


def test_without_a_compiler_the_torch_path_runs_with_one_warning(tmp_path):
    code = (
        "import logging, torch; logging.basicConfig(level=logging.WARNING)\n"
        "from rcpforge.trainers.precision import kernels\n"
        "from rcpforge.trainers.precision.quantize import quantize\n"
        "assert not kernels.available()\n"
        "q = quantize(torch.tensor([1.0625, 17.0, 449.0]), 'e4m3', block=32)\n"
        "print(q.tolist())\n"
    )
    env = dict(os.environ, CC=str(tmp_path / "no-such-cc"), RCPFORGE_KERNEL_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("fused quantizer unavailable") == 1
    assert proc.stdout.strip() == "[1.0, 16.0, 448.0]"


def test_a_broken_compiler_leaves_no_partial_library(tmp_path):
    fake_cc = tmp_path / "cc"
    fake_cc.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo fake && exit 0\necho broken >&2; exit 1\n")
    fake_cc.chmod(0o755)
    cache = tmp_path / "cache"
    code = "from rcpforge.trainers.precision import kernels; print(kernels.available())"
    env = dict(os.environ, CC=str(fake_cc), RCPFORGE_KERNEL_CACHE=str(cache))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.strip() == "False" and "broken" in proc.stderr
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("block,mode", [m for m in MODES if m[0] is not None and not isinstance(m[0], tuple)]
                         + [(None, "nvfp4")])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("shape", [(64, 48), (50, 37)])
def test_a_transposed_view_equals_its_contiguous_copy(torch_path, fmt, block, mode, rounding, shape):
    """The copy of an operand for the wgrad/dgrad GEMMs is quantized from a transposed
    view, in place (the column kernel); the torch path quantizes a contiguous copy."""
    x = _data(shape, seed=17).t()
    assert not x.is_contiguous()

    def run():
        g = torch.Generator().manual_seed(4)
        return fake_quant_factored(x, fmt, block, mode, rounding, g)[0]

    fused, plain = torch_path(run)
    assert _same(fused.dequant(), plain.dequant())
    assert (fused.exact, fused.multiplier) == (plain.exact, plain.multiplier)
    for a, b in ((fused.row_div, plain.row_div), (fused.col_div, plain.col_div)):
        assert (a is None and b is None) or _same(a.contiguous(), b.contiguous())
    if fused.exact:
        assert _same(fused.bf16(), plain.bf16())


@pytest.mark.parametrize("name,options", [
    ("fp8_tensorwise", {}), ("fp8_channelwise", {}), ("fp8_block", {}),
    ("fp8_block", {"use_f32_scales": True}), ("nvfp4", {}), ("mxfp8", {}),
])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_epilogue_equals_torch(torch_path, name, options, with_bias):
    """The BF16 GEMM's output widened, scaled by the per-tensor and per-row factors and
    biased in one pass gives the separate torch ops' result bit for bit."""
    from rcpforge.trainers.precision.linear import QuantizedGemm, _mm
    from rcpforge.trainers.recipes.resolve import resolve_recipe

    gen = torch.Generator().manual_seed(8)
    x, w = torch.randn(40, 64, generator=gen) * 5, torch.randn(24, 64, generator=gen) / 7
    bias = torch.randn(24, generator=gen) if with_bias else None

    def run():
        xq, wq = QuantizedGemm(resolve_recipe(name, options)).quantize_pair(x, "x", w, "w")
        assert xq.output_factored and wq.output_factored  # the BF16 path with its epilogue
        return _mm(xq, wq, bias)

    fused, plain = torch_path(run)
    assert _same(fused, plain)


def test_workers_starting_together_build_one_library(tmp_path):
    """Campaign workers on a fresh machine (or a shared cache directory) start at once:
    each builds beside the target and renames, so all load a complete library and one
    file remains."""
    cache = tmp_path / "cache"
    code = "from rcpforge.trainers.precision import kernels; print(kernels.available())"
    env = dict(os.environ, RCPFORGE_KERNEL_CACHE=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [o.strip() for o, _ in outs] == ["True"] * 4, [e for _, e in outs]
    assert [p.name for p in cache.iterdir()] == [next(cache.iterdir()).name]
    assert next(cache.iterdir()).suffix == ".so"


def test_an_unwritable_cache_directory_falls_back_to_a_private_temporary_one(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = "from rcpforge.trainers.precision import kernels; print(kernels.available())"
    env = dict(os.environ, RCPFORGE_KERNEL_CACHE=str(blocker / "kernels"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.stdout.strip() == "True", proc.stderr
    assert list((tmp_path / "tmp").glob("rcpforge-kernels-*/qkernel-*.so"))
