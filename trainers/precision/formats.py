"""Element formats: rounding already-scaled values onto the E4M3, E5M2, E2M1, E2M3 or
E3M2 grid.

Everything here works on float32 tensors and returns float32 values that lie exactly on
the format's grid, saturated at its largest finite value (docs/numerics.md: torch's E5M2 cast
does not saturate, so every value is clamped before any cast). NaN stays NaN."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ElementFormat:
    name: str
    max: float  # largest finite value
    emin: int  # exponent of the smallest normal value
    mbits: int  # explicit mantissa bits
    dtype: torch.dtype | None  # torch storage dtype whose cast rounds RNE, if any

    @property
    def emax(self) -> int:
        """Exponent of the largest power of two in the format (OCP MX `emax_elem`)."""
        return math.floor(math.log2(self.max))


FORMATS: dict[str, ElementFormat] = {
    "e4m3": ElementFormat("e4m3", 448.0, -6, 3, torch.float8_e4m3fn),
    "e5m2": ElementFormat("e5m2", 57344.0, -14, 2, torch.float8_e5m2),
    # torch's float4_e2m1fn_x2 is storage only (every cast raises), so E2M1 is done here.
    "e2m1": ElementFormat("e2m1", 6.0, 0, 1, None),
    # OCP MX v1.0's FP6 element formats (section 5.3.2): no inf or NaN, so the max is the
    # all-ones code: E2M3 (bias 1) 1.875 * 2^2 = 7.5, subnormal step 2^-3; E3M2 (bias 3)
    # 1.75 * 2^4 = 28, subnormal step 2^-4. torch has no FP6 dtype.
    "e2m3": ElementFormat("e2m3", 7.5, 0, 3, None),
    "e3m2": ElementFormat("e3m2", 28.0, -2, 2, None),
}

# Kept for the spine's callers: fmt -> (dtype, max).
FP8_DTYPES: dict[str, tuple[torch.dtype, float]] = {
    k: (f.dtype, f.max) for k, f in FORMATS.items() if f.dtype is not None
}


def get_format(fmt: str) -> ElementFormat:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown element format {fmt!r}; valid formats: {', '.join(FORMATS)}") from None


def _rne(y: torch.Tensor, f: ElementFormat, inplace: bool = False, saturate: bool = True) -> torch.Tensor:
    """Round-to-nearest-even onto the format's grid, saturating, without division or
    rounding ops: add and subtract C = 1.5 * 2^23 * ulp, where ulp is the grid spacing
    at y. The float32 sum y + C lies in the binade whose spacing is exactly ulp, so the
    addition itself rounds y to the grid, half to even (C / ulp is even), and the
    subtraction is exact. A value that rounds to zero comes back as +0, so the sign bit
    is or-ed back in (copysign is 3x slower on CPU). C takes three integer passes over
    the exponent bits. On CPU this is several times faster than casting to float8 and
    back (and faster than divide, round, multiply), and it covers E2M1, which torch
    cannot cast to. With `inplace`, y (a float32 temporary) is clamped in place;
    `saturate=False` skips the clamp for values known to be finite and below the max
    plus half an ulp there (they round to at most the max)."""
    if saturate:  # NaN stays NaN, inf saturates
        y = y.clamp_(-f.max, f.max) if inplace else y.clamp(-f.max, f.max)
    c = _spacing(y, f, ((23 - f.mbits) << 23) + _HALF_MANTISSA)
    r = (y + c).sub_(c)
    _or_sign(r, y)
    return r


_EXPONENT = 0x7F800000
_SIGN = -0x80000000  # 0x80000000 as an int32
_HALF_MANTISSA = 0x400000  # the mantissa of 1.5
_CONSTANTS: dict[tuple[int, torch.device], torch.Tensor] = {}


def _i32(value: int, like: torch.Tensor) -> torch.Tensor:
    """value as a 0-dim int32 tensor on like's device, made once: an int op with a Python
    int converts the int to a tensor on every call (a copy each time)."""
    key = (value, like.device)
    const = _CONSTANTS.get(key)
    if const is None:
        const = _CONSTANTS[key] = torch.tensor(value, dtype=torch.int32, device=like.device)
    return const


def _spacing(y: torch.Tensor, f: ElementFormat, offset: int) -> torch.Tensor:
    """The float32 whose bits are those of 2^e plus `offset`, e the exponent of |y|
    lifted to the format's smallest normal exponent: with offset ((23 - m) << 23) + 1.5's
    mantissa it is C = 1.5 * 2^23 * ulp, with -(m << 23) the ulp itself (the format's
    grid spacing at |y|, the subnormal spacing below the normals). From y's float32
    exponent bits (torch.frexp is 10x slower on CPU)."""
    bits = torch.bitwise_and(y.view(torch.int32), _i32(_EXPONENT, y))
    bits.clamp_(min=_i32((f.emin + 127) << 23, y)).add_(_i32(offset, y))
    return bits.view(torch.float32)


def _or_sign(r: torch.Tensor, y: torch.Tensor) -> None:
    """Give r (holding +0 or positive values, or NaN) the signs of y, in place."""
    r.view(torch.int32).bitwise_or_(torch.bitwise_and(y.view(torch.int32), _i32(_SIGN, y)))


def stochastic_round(y: torch.Tensor, f: ElementFormat, generator: torch.Generator | None) -> torch.Tensor:
    """Round to one of the two neighbouring grid points with probability proportional to
    closeness, so the expected value is y (before saturation)."""
    u = torch.rand(y.shape, generator=generator, dtype=torch.float32, device=y.device)
    return stochastic_round_with(y, f, u)


def stochastic_round_with(y: torch.Tensor, f: ElementFormat, u: torch.Tensor) -> torch.Tensor:
    """stochastic_round with the uniform draws given (one per element of y): two
    candidate quantizations of one tensor (4-over-6) round with the same draws."""
    a = y.abs()
    ulp = _spacing(a, f, -(f.mbits << 23))
    q = a.div_(ulp).add_(u).floor_().mul_(ulp).clamp_(max=f.max)  # in a's memory
    _or_sign(q, y)  # q >= +0: the same as copysign
    return q


def round_to_format(
    y: torch.Tensor, fmt: str, rounding: str = "rne", generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round scaled float32 values to the format's grid with saturation."""
    f = get_format(fmt)
    if rounding == "sr":
        return stochastic_round(y.float(), f, generator)
    if rounding != "rne":
        raise ValueError(f"unknown rounding {rounding!r}; valid: rne, sr")
    return _rne(y.float(), f)


def round_inplace_ok(y: torch.Tensor, fmt: str, saturate: bool = True) -> torch.Tensor:
    """As round_to_format (RNE) for a float32 tensor the caller no longer needs;
    `saturate=False` when |y| is known to be finite and at most the format's max times
    (1 + 2^-22) (see `_rne`)."""
    return _rne(y, FORMATS[fmt], inplace=True, saturate=saturate)


def cast_saturating(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Round x (already scaled) to the format's grid with saturation; returns float32."""
    return round_to_format(x, fmt)
