"""Line 11 of docs/numerics.md's list of checks: the MX quantizers agree bit for bit with torchao
0.18's emulated MXTensor (FLOOR and RCEIL), on random data across many magnitudes."""

from __future__ import annotations

import warnings

import pytest
import torch

from rcpforge.trainers.precision import quantize

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
    _SKIP = None
except Exception as err:  # torchao is a test-only extra
    _SKIP = f"torchao cannot be imported ({type(err).__name__}: {err}); pip install --no-deps torchao==0.18.0"
    print(_SKIP)


@pytest.fixture(autouse=True)
def _torchao_present():
    if _SKIP is not None:
        from tests.conftest import missing_service

        missing_service(_SKIP)


DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1": torch.float4_e2m1fn_x2}


def _data(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # columns spread over 2^-20 .. 2^20 so blocks see every scale exponent and subnormals
    spread = torch.exp2(torch.empty(1, 512).uniform_(-20, 20, generator=gen))
    return torch.randn(64, 512, generator=gen) * spread


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mx_matches_torchao_bit_for_bit(fmt, mode):
    for seed in range(3):
        x = _data(seed)
        ref = MXTensor.to_mx(x, DTYPES[fmt], 32, scaling_mode=getattr(ScaleCalculationMode, mode.upper()))
        ref = ref.dequantize(torch.float32)
        got = quantize(x, fmt, block=32, scale_mode=mode)
        assert torch.equal(got.view(torch.int32), ref.view(torch.int32)), (fmt, mode, seed)
