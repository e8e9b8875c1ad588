"""Numeric formats, quantizers and the quantized linear layer (torch).

`quantize(x, fmt, *, block=None, scale_mode="floor", rounding="rne", seed=None)` is the
public fake-quantizer (see `rcpforge.trainers.precision.quantize`)."""

from rcpforge.trainers.precision.quantize import quantize

__all__ = ["quantize"]
