"""Autocast switched off inside the GEMMs that define their own precision (the quantized
linear layer, the FP8 attention matmuls, the reference precision's BF16 GEMMs on a CPU):
their operands arrive as autocast left them, and the FP32 GEMMs inside must stay FP32
GEMMs. Switched off and on by hand: torch.amp.custom_fwd and autocast context managers
cost tens of microseconds per layer, a sizeable part of a small model's step."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

_DEVICES = ("cpu", "cuda")
F = TypeVar("F", bound=Callable)


def without_autocast(fn: F) -> F:
    """fn with autocast off on both device types while it runs (as it was after)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        state = tuple(torch.is_autocast_enabled(d) for d in _DEVICES)
        for device, on in zip(_DEVICES, state, strict=True):
            if on:
                torch.set_autocast_enabled(device, False)
        try:
            return fn(*args, **kwargs)
        finally:
            for device, on in zip(_DEVICES, state, strict=True):
                if on:
                    torch.set_autocast_enabled(device, True)

    return wrapped  # type: ignore[return-value]
