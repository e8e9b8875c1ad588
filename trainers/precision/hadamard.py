"""The 16-point random Hadamard transform for the wgrad operands (NVFP4 recipe).

dW = dY^T X contracts over the token dimension; multiplying both operands by the same
orthonormal H along that dimension leaves the product unchanged, (dY^T H)(X^T H)^T =
dY^T X, while spreading outliers over 16 values before they are quantized."""

from __future__ import annotations

import torch
import torch.nn.functional as F

SIZE = 16
# Fixed random signs: the same transform on every run and attempt (reproducibility).
_SIGN_SEED = 0x5EED


def hadamard_matrix(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """H = Sylvester Hadamard(16) / 4, times a fixed random diagonal of signs: H H^T = I."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < SIZE:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    gen = torch.Generator().manual_seed(_SIGN_SEED)
    signs = torch.randint(0, 2, (SIZE,), generator=gen).double() * 2 - 1
    return ((signs[:, None] * h) / SIZE**0.5).to(dtype)


_H32 = hadamard_matrix(torch.float32)


def hadamard_last_dim(t: torch.Tensor) -> torch.Tensor:
    """Apply H block-diagonally along the last dimension, zero-padded to a multiple of 16.
    The result keeps the padded length: the transformed padding is needed for the two
    operands' product to stay unchanged."""
    n = t.shape[-1]
    pad = -n % SIZE
    h = (_H32 if t.dtype == torch.float32 else hadamard_matrix(t.dtype)).to(t.device)
    v = F.pad(t, (0, pad)) if pad else t
    return (v.reshape(*v.shape[:-1], -1, SIZE) @ h).reshape(v.shape)
