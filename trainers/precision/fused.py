"""FP8 GEMMs whose casts are fused: torchao's float8 training GEMM (the autograd function
`Float8Linear` calls), compiled with the model by `torch.compile` on a GPU, so the amax,
scale and float8 convert of each operand become one kernel instead of four.

A recipe takes this path only where torchao's recipe quantizes every operand as ours
does (`same_gemms` against our definition of the torchao recipe, whatever the recipe's
name): fp8_tensorwise (torchao "tensorwise": E4M3 x and W, E5M2 dY, FP32 fmax/amax
scales per tensor), fp8_rowwise ("rowwise": E4M3 everywhere, power-of-two scales per row
along the contraction) and fp8_rowwise_gw_hp ("rowwise_with_gw_hp": W's dgrad copy per
tensor, the wgrad GEMM in high precision).

How it differs from the emulation, by construction (tests/trainers/precision/test_fused.py
measures it on CPU, where torchao's float8 GEMM runs too):
- every quantized operand is the same, bit for bit (the same scales, the same float8
  values): the GEMM takes its input as it arrives, autocast off inside, as ours does
  (torchao's Float8Linear would first cast an FP32 input to BF16, a rounding ours has not);
- rowwise GEMMs give the same outputs and gradients, bit for bit;
- per-tensor scaled GEMMs: ours round the FP32-accumulated product to BF16 before the
  scales are applied (what a hardware FP8 GEMM writing BF16 does), torchao's output is
  FP32: one BF16 rounding apart (about 2^-9 relative, norm-wise);
- the wgrad GEMM of rowwise_with_gw_hp: ours in BF16 (the reference precision), torchao's
  in its inputs' dtype, FP32 here: the BF16 rounding of dY and x apart;
- a layer whose input is a BF16 activation (one out of a BF16 op under autocast):
  torchao's float8 operands keep the input's dtype as their own, so its output and
  gradients are rounded to BF16 in other places than ours. In the tiny LM the eval
  curves of the two paths agree to 1.5-3.2e-4 relative after 4 steps, not bit for bit.
The emulation stays the reference on CPU and the check on the GPU (`trainer.fp8_gemm:
emulated`)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from rcpforge.trainers.recipes.config import RecipeConfig, same_gemms
from rcpforge.trainers.recipes.named import RECIPES

# our recipe -> torchao's recipe of the same operands (Float8LinearConfig.from_recipe_name)
TORCHAO_RECIPES = {"fp8_tensorwise": "tensorwise", "fp8_rowwise": "rowwise", "fp8_rowwise_gw_hp": "rowwise_with_gw_hp"}
_DEFINITIONS = {name: RECIPES[name].resolve() for name in TORCHAO_RECIPES}


def torchao_recipe(recipe: RecipeConfig) -> str | None:
    """torchao's name for the recipe whose GEMMs this one's are, by definition (a variant
    or a written recipe with the same operands takes it too); None: no torchao recipe
    quantizes like this one."""
    return next((TORCHAO_RECIPES[n] for n, ref in _DEFINITIONS.items() if same_gemms(recipe, ref)), None)


@functools.cache
def torchao_missing() -> str | None:
    """Why torchao's float8 training cannot be imported here, or None when it can."""
    try:
        import torchao.float8  # noqa: F401
    except Exception as err:  # an absent or broken install: the run says which
        return f"torchao.float8 cannot be imported ({type(err).__name__}: {err})"
    return None


def fp8_gemm_path(setting: str, recipe: RecipeConfig, device: torch.device) -> str:
    """Which GEMMs a run's quantized linear layers take (`trainer.fp8_gemm`): "emulated"
    (ours, every recipe, every device), "scaled_mm" (our real FP8 GEMMs, unfused casts;
    fp8_tensorwise and fp8_rowwise on Hopper), or "torchao" (this module; compiled with
    the model on a GPU). "auto" takes the fastest there is for the recipe and the device:
    on Hopper or newer torchao where it quantizes like the recipe and imports, else our
    real FP8 where the recipe has it, else the emulation; on a CPU the emulation. A path
    the recipe has no GEMMs for falls back to the emulation; one the machine cannot run
    is a RuntimeError naming the setting and the fix."""
    from rcpforge.trainers.precision.gpu import hopper_or_newer, real_fp8_kind

    hopper = hopper_or_newer(device)
    if setting == "auto":
        if not hopper:
            return "emulated"
        if torchao_recipe(recipe) is not None and torchao_missing() is None:
            return "torchao"
        return "scaled_mm" if real_fp8_kind(recipe) else "emulated"
    if setting == "scaled_mm":
        if real_fp8_kind(recipe) is None:
            return "emulated"
        if not hopper:
            raise RuntimeError(f"trainer.fp8_gemm: scaled_mm needs a CUDA GPU of compute capability 9.0 or more, "
                               f"and this run is on {device}; set trainer.fp8_gemm: auto (or emulated)")
        return "scaled_mm"
    if setting == "torchao":
        if torchao_recipe(recipe) is None:
            return "emulated"
        missing = torchao_missing()
        if missing:
            raise RuntimeError(f"trainer.fp8_gemm: torchao, but {missing}; pip install --no-deps torchao==0.18.0, "
                               "or set trainer.fp8_gemm: auto")
        return "torchao"
    return "emulated"


class TorchaoFp8Gemm:
    """One linear layer's GEMM through torchao's float8 training function: x (..., K),
    w (N, K), optional bias -> (..., N), in x's dtype."""

    def __init__(self, recipe: RecipeConfig, name: str = "linear"):
        from torchao.float8 import Float8LinearConfig
        from torchao.float8.float8_linear import matmul_with_hp_or_float8_args
        from torchao.float8.float8_training_tensor import LinearMMConfig

        kind = torchao_recipe(recipe)
        if kind is None:
            raise ValueError(f"{recipe.name} quantizes unlike every torchao float8 recipe; it runs emulated")
        self.recipe, self.name, self.torchao_recipe = recipe, name, kind
        self._config = Float8LinearConfig.from_recipe_name(kind)
        self._mm_config = LinearMMConfig()
        self._matmul: Any = matmul_with_hp_or_float8_args

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        # Autocast off, so that each operand is cast to float8 from what arrives (an FP32
        # activation stays FP32 up to its cast) and the output is FP32, as ours.
        with torch.autocast(x.device.type, enabled=False):
            out = self._matmul.apply(x, w.t(), self._mm_config, self._config)
            return out if b is None else out + b.to(out.dtype)
