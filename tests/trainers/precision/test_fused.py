"""The fused FP8 path (trainers/precision/fused.py: torchao's float8 training GEMM) against
our emulation, on CPU, where torchao's float8 GEMM runs too: every quantized operand bit
for bit, and the GEMM outputs within the one BF16 rounding the module documents."""

from __future__ import annotations

import warnings

import pytest
import torch

from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
        from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig

        from rcpforge.trainers.precision.fused import TORCHAO_RECIPES, TorchaoFp8Gemm, torchao_recipe
    _SKIP = None
except Exception as err:  # torchao is a test-only extra on CPU
    _SKIP = f"torchao cannot be imported ({type(err).__name__}: {err}); pip install --no-deps torchao==0.18.0"


@pytest.fixture(autouse=True)
def _torchao_present():
    if _SKIP is not None:
        from tests.conftest import missing_service

        missing_service(_SKIP)


DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
BF16_ROUNDING = 2.0**-8  # unit roundoff of BF16 (8 significant bits)


def _operands(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (tokens, K), W (N, K) and dY (tokens, N), rows and columns spread over 2^-12..2^12."""
    gen = torch.Generator().manual_seed(seed)

    def spread(*shape):
        rows = torch.exp2(torch.empty(shape[0], 1).uniform_(-12, 12, generator=gen))
        cols = torch.exp2(torch.empty(1, shape[1]).uniform_(-4, 4, generator=gen))
        return torch.randn(*shape, generator=gen) * rows * cols

    return spread(96, 64), spread(48, 64), spread(96, 48)


def _torchao_copy(t: torch.Tensor, fmt: str, role, axis: int | None, pow2: bool) -> torch.Tensor:
    """torchao's float8 copy of t, dequantized: per tensor (axis None) or with one scale
    per slice along `axis` (the GEMM's contraction dimension)."""
    from torchao.float8.config import ScalingGranularity

    granularity = ScalingGranularity.TENSORWISE if axis is None else ScalingGranularity.AXISWISE
    q = hp_tensor_to_float8_dynamic(t, DTYPES[fmt], LinearMMConfig(), gemm_input_role=role,
                                    scaling_granularity=granularity, axiswise_dim=axis,
                                    round_scales_to_power_of_2=pow2)
    return q.to_original_precision()


def test_every_torchao_recipe_is_one_of_ours_by_definition():
    assert {n: torchao_recipe(RECIPES[n].resolve()) for n in TORCHAO_RECIPES} == TORCHAO_RECIPES
    # a variant with the same operands takes the path, one with other operands does not
    variant = resolve_recipe("mine", {"base": "fp8_tensorwise", "quantize_residual": False})
    assert torchao_recipe(variant) == "tensorwise"
    for other in ("fp8_delayed", "fp8_channelwise", "mxfp8", "nvfp4", "bf16"):
        assert torchao_recipe(RECIPES[other].resolve()) is None, other
    with pytest.raises(ValueError, match="runs emulated"):
        TorchaoFp8Gemm(RECIPES["mxfp8"].resolve())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(TORCHAO_RECIPES))
def test_torchao_quantizes_every_operand_of_each_gemm_as_we_do_bit_for_bit(name, seed):
    """Forward x and W, dgrad dY and W, wgrad dY and x: each contraction's copy, as our
    emulation takes it (rowwise: quantized again along that GEMM's contraction)."""
    recipe = RECIPES[name].resolve()
    ours = QuantizedGemm(recipe, "layer")
    x, w, dy = _operands(seed)
    rowwise = recipe.x.scaling == "rowwise"
    pow2 = rowwise  # torchao's rowwise recipes round scales down to powers of two
    inp, wt, grad = GemmInputRole.INPUT, GemmInputRole.WEIGHT, GemmInputRole.GRAD_OUTPUT
    # forward: x per row of x, W per row of W (torchao casts W^T along its dim 0)
    assert torch.equal(_torchao_copy(x, "e4m3", inp, -1 if rowwise else None, pow2), ours.quantize(x, "x"))
    assert torch.equal(_torchao_copy(w.t(), "e4m3", wt, 0 if rowwise else None, pow2), ours.quantize(w, "w").t())
    # dgrad dX = dY W: dY per token along N; W along N (rowwise_with_gw_hp: W per tensor)
    dy_fmt = recipe.dy.fmt
    assert torch.equal(_torchao_copy(dy, dy_fmt, grad, -1 if rowwise else None, pow2), ours.quantize(dy, "dy"))
    w_dgrad = "w_dgrad" if recipe.w_dgrad else "w"
    w_axis = -1 if rowwise and not recipe.w_dgrad else None
    assert torch.equal(_torchao_copy(w.t(), "e4m3", wt, w_axis, pow2), ours.quantize(w.t().contiguous(), w_dgrad))
    if recipe.wgrad_hp:
        return  # the wgrad GEMM quantizes nothing (torchao: DISABLED)
    # wgrad dW = dY^T x: dY and x along the tokens
    axis = 0 if rowwise else None
    assert torch.equal(_torchao_copy(dy, dy_fmt, grad, axis, pow2), ours.quantize(dy.t().contiguous(), "dy").t())
    assert torch.equal(_torchao_copy(x, "e4m3", inp, axis, pow2), ours.quantize(x.t().contiguous(), "x").t())


def _layer(gemm, x, w, dy, autocast: bool):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = gemm(x, w, None)
    y.backward(dy.to(y.dtype))
    return y.float().detach(), x.grad, w.grad


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("name", sorted(TORCHAO_RECIPES))
def test_a_layer_s_output_and_gradients_are_ours_up_to_the_documented_bf16_roundings(name, autocast):
    """Rowwise: bit for bit. Per tensor: ours round the product to BF16 before the scales,
    torchao's is FP32. rowwise_with_gw_hp's wgrad: ours in BF16, torchao's in FP32. The
    same under BF16 autocast (both GEMMs take their input as it arrives)."""
    recipe = RECIPES[name].resolve()
    x, w, dy = _operands(7)
    ours = _layer(QuantizedGemm(recipe, "layer"), x, w, dy, autocast)
    theirs = _layer(TorchaoFp8Gemm(recipe), x, w, dy, autocast)
    tensorwise = recipe.x.scaling == "tensorwise"
    for what, a, b in zip(("y", "dx", "dw"), ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.float32, what
        if recipe.wgrad_hp and what == "dw":
            bound = 2 * BF16_ROUNDING  # dY and x rounded to BF16 in ours
        elif tensorwise:
            bound = BF16_ROUNDING
        else:
            assert torch.equal(a, b), what
            continue
        relative = ((a - b).norm() / b.norm()).item()
        assert 0 < relative <= bound, (what, relative)


def _eval_curve(recipe: str, fp8_gemm: str) -> list[float]:
    from tests.trainers.test_written_recipes import _curve, _short

    return _curve(_short([recipe], trainer={**_tiny_trainer(), "fp8_gemm": fp8_gemm})[recipe])


def _tiny_trainer() -> dict:
    from tests.helpers.campaigns import tiny_campaign

    return tiny_campaign()["trainer"]


@pytest.mark.parametrize("name", sorted(TORCHAO_RECIPES))
def test_the_tiny_lm_on_torchao_s_gemms_trains_as_on_ours_within_the_documented_roundings(name):
    """A few training steps of the tiny LM (BF16 autocast, as every run): the eval curves
    of the two paths differ only by the BF16 roundings fused.py lists (not bit for bit:
    the layers whose input is a BF16 activation round their outputs and gradients to BF16
    in other places)."""
    ours, theirs = _eval_curve(name, "emulated"), _eval_curve(name, "torchao")
    assert len(ours) == len(theirs) == 2
    assert max(abs(a - b) / a for a, b in zip(ours, theirs, strict=True)) < 1e-3, (ours, theirs)
    assert ours != _eval_curve("bf16", "emulated")  # the recipe did quantize
    # the path is in the run key only where it is set
    from tests.trainers.test_written_recipes import _short

    auto = _short(["fp8_rowwise"])["fp8_rowwise"]
    assert "fp8_gemm" not in auto.trainer
    assert auto.run_key != _short(["fp8_rowwise"], trainer={**_tiny_trainer(), "fp8_gemm": "torchao"})[
        "fp8_rowwise"].run_key


def test_the_path_a_run_takes_follows_the_setting_the_recipe_and_the_device():
    from rcpforge.trainers.precision.fused import fp8_gemm_path

    cpu = torch.device("cpu")
    tensorwise, nvfp4 = RECIPES["fp8_tensorwise"].resolve(), RECIPES["nvfp4"].resolve()
    assert fp8_gemm_path("auto", tensorwise, cpu) == "emulated"  # CPU: the emulation, the reference
    assert fp8_gemm_path("torchao", tensorwise, cpu) == "torchao"  # forced (these parity tests)
    assert fp8_gemm_path("torchao", nvfp4, cpu) == "emulated"  # no torchao recipe quantizes like it
    assert fp8_gemm_path("emulated", tensorwise, cpu) == "emulated"
    with pytest.raises(RuntimeError, match="trainer.fp8_gemm: scaled_mm needs a CUDA GPU"):
        fp8_gemm_path("scaled_mm", tensorwise, cpu)
    from rcpforge.sweeps.spec import CampaignError, parse_campaign
    from tests.helpers.campaigns import tiny_campaign

    with pytest.raises(CampaignError, match=r"^c.yaml: trainer\.fp8_gemm: scaled_mm runs real FP8 GEMMs on a GPU"):
        parse_campaign(tiny_campaign(trainer={**_tiny_trainer(), "fp8_gemm": "scaled_mm"}), source="c.yaml")


def test_the_gpu_benchmark_runs_on_a_cpu_as_a_smoke_run_and_writes_its_json(tmp_path):
    """benchmarks/gpu_fp8.py, prepared here before its one run on an H200: its rows, the
    torchao path among them, and the JSON the issue names (figures meaningless on a CPU)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "gpu_fp8.json"
    made = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu_fp8.py"), "--device", "cpu", "--sizes", "64", "--layers", "1",
         "--heads", "4", "--context", "16", "--batch", "4", "--steps", "1", "--rounds", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert made.returncode == 0, made.stdout + made.stderr
    found = json.loads(out.read_text())
    assert {"device", "torch", "date", "d_model", "bf16_ms", "fp8_fused_ms", "speedup"} <= set(found)
    assert found["d_model"] == 64 and found["speedup"] == pytest.approx(found["bf16_ms"] / found["fp8_fused_ms"])
    assert {(r["recipe"], r["path"]) for r in found["rows"]} == {
        ("bf16", "bf16"), ("fp8_tensorwise", "torchao"), ("fp8_rowwise", "torchao")}
    assert "relative difference" not in made.stdout or "torchao" in made.stdout
