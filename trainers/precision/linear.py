"""The quantized linear layer: one autograd function that fake-quantizes the inputs of
the three GEMMs (forward x.W^T, dgrad dY.W, wgrad dY^T.x) as the recipe names, with FP32
master weights and FP32 accumulation.

Every operand copy is quantized along its GEMM's contraction dimension: scalings that
do not depend on the orientation (tensorwise, delayed, channelwise, 2-D tiles, MoR per
tensor) are quantized once and reused transposed; the others (rowwise, 1-D blocks, MX,
NVFP4 1x16) quantize the transposed copy again from the high-precision tensor (W's own
dgrad copy, `w_dgrad`, too). A recipe's `backward` option overrides the dgrad and wgrad
operands (`_backward_override`)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from rcpforge.trainers.precision import gpu, kernels, reference
from rcpforge.trainers.precision.autocast import without_autocast
from rcpforge.trainers.precision.hadamard import hadamard_last_dim, hadamard_matrix
from rcpforge.trainers.precision.quantize import (
    abs_max, fake_quant_factored, mor_quantize, quantize_delayed, quantize_with_scale,
)
from rcpforge.trainers.precision.quantized import Quantized
from rcpforge.trainers.precision.telemetry import Telemetry
from rcpforge.trainers.recipes.config import HadamardSigns, RecipeConfig
from rcpforge.trainers.recipes.operands import OperandQuant
from rcpforge.trainers.recipes.options import Backward, DelayedOptions, MorOptions
from rcpforge.trainers.recipes.written import WrittenOptions

LinearFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


class _Delayed:
    """TransformerEngine delayed scaling for one operand of one layer: the scale comes
    from the max of the amax history (before this step's amax is recorded); a zero or
    non-finite amax is not recorded, so the previous scale stays."""

    def __init__(self, fmax: float, history_len: int, margin: int):
        self.fmax, self.margin = fmax, margin
        self.history = torch.zeros(history_len)
        self.step = 0
        self.scale = 1.0

    def update(self, amax: float) -> None:
        # a Python float: the history stays on the CPU whatever device amax came from
        amax = _reduced_over_ranks(amax)
        if math.isfinite(amax) and amax > 0:
            self.history[self.step % len(self.history)] = amax
            self.step += 1
            self.scale = float(self.fmax / self.history.max() / 2.0**self.margin)


def _reduced_over_ranks(amax: float) -> float:
    """In a data-parallel run (a gang), the max of this amax over the ranks, as
    TransformerEngine's `DelayedScaling(reduce_amax=True)` reduces it over its FP8 group:
    every rank then records the same history and uses the same scale. A non-finite amax
    on any rank is non-finite on all, so none of them records it."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return amax
    t = torch.tensor([amax if math.isfinite(amax) else math.inf], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


class QuantizedGemm:
    """The GEMM of one linear layer under a recipe; holds the layer's numeric state
    (delayed-scaling histories, the stochastic-rounding generator)."""

    def __init__(
        self, recipe: RecipeConfig, name: str = "linear", telemetry: Telemetry | None = None,
        seed: int = 0, real_fp8: bool | None = None,
    ):
        if recipe.is_reference:
            raise ValueError("the bf16 recipe has no quantized GEMM; use F.linear")
        self.recipe = recipe if recipe.settings is not None else recipe.resolve()
        self.name = name
        self.telemetry = telemetry
        self.generator = torch.Generator().manual_seed(seed)
        self._delayed: dict[str, _Delayed] = {}
        self._hadamard: torch.Tensor | None = None
        self.real_fp8 = real_fp8

    def quantize(self, t: torch.Tensor, which: str) -> torch.Tensor:
        """Fake-quantize a 2-D operand copy along its last dimension (dequantized)."""
        return self.quantize_factored(t, which).dequant()

    def quantize_factored(self, t: torch.Tensor, which: str) -> Quantized:
        """Fake-quantize a 2-D operand copy along its last dimension."""
        q: OperandQuant = getattr(self.recipe, which)
        if self.generator.device != t.device:  # stochastic rounding draws on t's device
            self.generator = torch.Generator(t.device).manual_seed(self.generator.initial_seed())
        tel = self.telemetry if self.telemetry is not None and self.telemetry.active else None
        if q.scaling == "mor":
            opts = self.recipe.opts
            assert isinstance(opts, (MorOptions, WrittenOptions))
            out, kept, units = mor_quantize(t.contiguous(), opts.threshold, q.block)
            if tel is not None:
                tel.add_mor(self.name, kept, units)
            return out
        if q.scaling == "delayed":
            return self._quantize_delayed(t, which, q, tel)
        if q.scaling == "tensorwise":
            block, mode = None, q.scale_mode
        elif q.scaling in ("rowwise", "channelwise"):
            block, mode = t.shape[-1], q.scale_mode
        else:
            block, mode = q.block, q.scale_mode
        # channelwise: per-row FP32 scales, factored out of the forward GEMM's output
        out, counts = fake_quant_factored(t, q.fmt, block, mode, q.rounding, self.generator, tel is not None)
        if tel is not None:
            tel.add(which, counts)
        return out

    def _delayed_state(self, which: str) -> _Delayed:
        state = self._delayed.get(which)
        if state is None:
            opts = self.recipe.opts
            assert isinstance(opts, DelayedOptions)
            fmax = 448.0 if getattr(self.recipe, which).fmt == "e4m3" else 57344.0
            state = self._delayed[which] = _Delayed(fmax, opts.amax_history_len, opts.margin)
        return state

    def wgrad_hadamard(self) -> torch.Tensor | None:
        """The wgrad GEMM's Hadamard matrix: None for the default 16-point one with fixed
        signs; random signs are drawn from the layer's stream, one vector per GEMM."""
        r = self.recipe
        if r.hadamard_signs == HadamardSigns.RANDOM:
            g = self.generator
            signs = torch.randint(0, 2, (r.hadamard_size,), generator=g, device=g.device) * 2 - 1
            return hadamard_matrix(torch.float32, r.hadamard_size, signs)
        if (r.hadamard_size, r.hadamard_signs) == (16, HadamardSigns.FIXED):
            return None
        if self._hadamard is None:
            self._hadamard = hadamard_matrix(torch.float32, r.hadamard_size, r.hadamard_signs == HadamardSigns.FIXED)
        return self._hadamard

    def numeric_state(self) -> dict:
        """What a checkpoint needs to continue this layer's numerics bit for bit: the
        stochastic-rounding stream and the delayed-scaling histories."""
        return {
            "generator": (str(self.generator.device), self.generator.get_state()),
            "delayed": {w: (d.history.clone(), d.step, d.scale) for w, d in self._delayed.items()},
        }

    def load_numeric_state(self, state: dict) -> None:
        device, rng = state["generator"]
        self.generator = torch.Generator(device)
        self.generator.set_state(rng)
        for which, (history, step, scale) in state["delayed"].items():
            d = self._delayed_state(which)
            d.history, d.step, d.scale = history.clone(), step, scale

    def _quantize_delayed(self, t, which, q, tel) -> Quantized:
        state = self._delayed_state(which)
        if tel is None:
            out, amax = quantize_delayed(t.detach(), q.fmt, state.scale)
            state.update(amax)
            return out
        out, counts = quantize_with_scale(t, q.fmt, state.scale, counts=True)
        state.update(abs_max(t.detach()))
        tel.add(which, counts)
        return out

    def quantize_pair(
        self, a: torch.Tensor, a_which: str, b: torch.Tensor, b_which: str
    ) -> tuple[Quantized, Quantized]:
        """The two operands of one GEMM, each laid out with the contraction dimension
        last: stacked and quantized in one pass where that gives the same values (see
        `_stackable`), else one after the other (a first, as the SR stream expects)."""
        if not kernels.usable(a) and self._stackable(a_which, b_which):
            both = self.quantize_factored(_stack(a, b), a_which)
            if both.exact and not both.core.is_cpu:  # a CPU's BF16 GEMMs take the FP32 core
                both.bf16()  # one cast, shared by the two halves
            return both.split(a.shape[0])
        # the fused kernel reads transposed views in place: no stacking, no copies
        first = self.quantize_factored(a, a_which)
        return first, self.quantize_factored(b, b_which)

    def _stackable(self, a_which: str, b_which: str) -> bool:
        """Stacking rows changes nothing when both operands are quantized alike with
        scales per row or per 1-D block (no scale depends on another row), rounding to
        nearest (SR draws depend on the shape) and no telemetry counts (kept per
        operand). Half the torch calls, on tensors of this size their main cost."""
        qa, qb = getattr(self.recipe, a_which), getattr(self.recipe, b_which)
        tel = self.telemetry is not None and self.telemetry.active
        return (qa == qb and qa.per_gemm and qa.scaling not in ("nvfp4", "mor")
                and qa.rounding == "rne" and not tel)

    def operand_t(self, hp: torch.Tensor, quantized: Quantized, which: str) -> Quantized:
        """The copy of an operand for a GEMM that contracts over its first dimension,
        laid out with that dimension last."""
        if getattr(self.recipe, which).per_gemm:
            return self.quantize_factored(hp.t(), which)
        return quantized.t()

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return _QuantizedLinear.apply(x, w, b, self)


class _QuantizedLinear(torch.autograd.Function):
    # Inside, autocast is off on both device types: the GEMMs run on the fake-quantized
    # FP32 operands with FP32 accumulation (or on real FP8 operands). The inputs arrive
    # as they are (a BF16 activation under autocast): the emulated path makes them FP32
    # (exact), the real FP8 path casts BF16 to float8 without an FP32 copy, and autograd
    # casts the FP32 dX back to the input's dtype.
    @staticmethod
    @without_autocast
    def forward(ctx, x, weight, bias, gemm: QuantizedGemm):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        w = weight.float()
        ctx.gemm, ctx.has_bias, ctx.shape = gemm, bias is not None, shape
        if gpu.use_real_fp8(gemm, x2):
            out, saved = gpu.forward(gemm, x2, w)
            ctx.save_for_backward(*saved)
            ctx.real = True
            if bias is not None:
                out = out + bias.float()
        else:
            x2 = x2.float()
            xq, wq = gemm.quantize_pair(x2, "x", w, "w")
            ctx.save_for_backward(x2, w)
            ctx.quantized = (xq, wq)
            ctx.real = False
            out = _mm(xq, wq, bias)
        return out.reshape(*shape[:-1], -1)

    @staticmethod
    @without_autocast
    def backward(ctx, dy):
        gemm: QuantizedGemm = ctx.gemm
        dy2 = dy.reshape(-1, dy.shape[-1]).float()
        if ctx.real:
            dx, dw = gpu.backward(gemm, dy2, ctx.saved_tensors)
        else:
            dx, dw = _backward_emulated(gemm, dy2, *ctx.saved_tensors, *ctx.quantized)
            del ctx.quantized
        db = dy2.sum(0) if ctx.has_bias else None
        return dx.reshape(ctx.shape), dw, db, None


def _stack(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.cat([a, b]); transposed views are copied into the two halves of one buffer
    instead (torch.cat of transposed views is about twice as slow on CPU)."""
    if a.is_contiguous() and b.is_contiguous():
        return torch.cat([a, b])
    out = a.new_empty((a.shape[0] + b.shape[0], a.shape[1]))
    out[: a.shape[0]].copy_(a)
    out[a.shape[0]:].copy_(b)
    return out


def _mm(a: Quantized, b: Quantized, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b^T (+ bias). BF16-exact operands whose factors are constant along the
    contraction multiply as a BF16 GEMM (FP32 accumulation, the output rounded to BF16
    as a hardware low-precision GEMM does; the per-tensor and per-row FP32 factors are
    then applied to the output): on a CPU as an FP32 GEMM of the BF16-exact cores
    (trainers/precision/reference.py), elsewhere natively. Others in FP32 on the
    dequantized values."""
    if a.output_factored and b.output_factored:
        if a.core.is_cpu:
            out = reference.gemm_bf16_out(a.core.float(), b.core.float().t())
        else:
            out = a.bf16() @ b.bf16().t()
        factor = a.multiplier * b.multiplier / (a.divisor * b.divisor)
        if kernels.usable_for_epilogue(out):
            return kernels.epilogue(out, factor, a.row_div, b.row_div, bias)
        out = out.float()
        if factor != 1.0:
            out.mul_(factor)
        if a.row_div is not None:
            out.div_(a.row_div)
        if b.row_div is not None:
            out.div_(b.row_div.t())
    else:
        out = a.dequant() @ b.dequant().t()
    return out if bias is None else out + bias.float()


def _backward_override(backward: Backward, dy2, x2, w, xq: Quantized, wq: Quantized):
    """TransformerEngine's backward override. high_precision: dgrad and wgrad on the
    unquantized tensors in BF16 (dY, W and x rounded to BF16, FP32 accumulation, the
    output rounded to BF16: the bf16 recipe's backward GEMMs). dequantized: on the
    forward's quantized-then-dequantized W and x (reused transposed, whatever the
    scaling: no fresh quantization along the other dimension) and dY in BF16 (no
    quantization of dY)."""
    if backward == Backward.HIGH_PRECISION:
        return reference.gemm(dy2, w), reference.gemm(dy2.t(), x2)
    dy_h = dy2.bfloat16()
    dyq = Quantized(dy_h.float(), _bf16=dy_h)
    return _mm(dyq, wq.t()), _mm(dyq.t(), xq.t())


def _backward_emulated(gemm: QuantizedGemm, dy2, x2, w, xq: Quantized, wq: Quantized):
    recipe = gemm.recipe
    backward = recipe.opts.backward
    if backward != Backward.QUANTIZED:
        return _backward_override(backward, dy2, x2, w, xq, wq)
    # dgrad dX = dY . W contracts over the output features: W's copy has them last
    if recipe.w_dgrad is not None and recipe.w_dgrad.per_gemm:  # along the output features, from W
        dyq, wt = gemm.quantize_factored(dy2, "dy"), gemm.quantize_factored(w.t(), "w_dgrad")
    elif recipe.w_dgrad is not None:  # quantized its own way (orientation-free scalings)
        dyq, wt = gemm.quantize_factored(dy2, "dy"), gemm.quantize_factored(w, "w_dgrad").t()
    elif recipe.w.per_gemm:
        dyq, wt = gemm.quantize_pair(dy2, "dy", w.t(), "w")
    else:
        dyq, wt = gemm.quantize_factored(dy2, "dy"), wq.t()
    dx = _mm(dyq, wt)
    # wgrad dW = dY^T . X contracts over the tokens
    if recipe.wgrad_hp:  # in the reference precision, as the bf16 recipe's wgrad
        return dx, reference.gemm(dy2.t(), x2)
    dy_w, x_w = ("dy_wgrad" if recipe.dy_wgrad else "dy"), ("x_wgrad" if recipe.x_wgrad else "x")
    if recipe.hadamard_wgrad:  # one H for both operands, so that it cancels in the product
        h = gemm.wgrad_hadamard()
        a = gemm.quantize_factored(hadamard_last_dim(dy2.t().contiguous(), h), dy_w)
        b = gemm.quantize_factored(hadamard_last_dim(x2.t().contiguous(), h), x_w)
        return dx, _mm(a, b)
    if recipe.dy_wgrad or recipe.x_wgrad:  # a wgrad copy of its own, from the high-precision tensor
        a = gemm.quantize_factored(dy2.t(), dy_w) if recipe.dy_wgrad else gemm.operand_t(dy2, dyq, "dy")
        b = gemm.quantize_factored(x2.t(), x_w) if recipe.x_wgrad else gemm.operand_t(x2, xq, "x")
        return dx, _mm(a, b)
    if recipe.dy.per_gemm and recipe.x.per_gemm:
        return dx, _mm(*gemm.quantize_pair(dy2.t(), "dy", x2.t(), "x"))
    return dx, _mm(gemm.operand_t(dy2, dyq, "dy"), gemm.operand_t(x2, xq, "x"))


def linear_for(
    recipe: RecipeConfig, name: str = "linear", telemetry: Telemetry | None = None, seed: int = 0
) -> LinearFn:
    """The GEMM function one linear layer of a recipe calls (a new state per call)."""
    if recipe.is_reference:
        return reference.linear
    return QuantizedGemm(recipe, name, telemetry, seed)
