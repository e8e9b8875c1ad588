"""The Hadamard transforms of the wgrad operands: 16-point with fixed random signs (the
NVFP4 recipe), 32-point with signs drawn per GEMM (mxfp4_sr_rht) or none (mxfp4_dethad; 16-point,
mxfp4_dethad16).

dW = dY^T X contracts over the token dimension; multiplying both operands by the same
orthonormal H along that dimension leaves the product unchanged, (dY^T H)(X^T H)^T =
dY^T X, while spreading outliers over 16 values before they are quantized."""

from __future__ import annotations

import torch
import torch.nn.functional as F

SIZE = 16
# Fixed random signs: the same transform on every run and attempt (reproducibility).
_SIGN_SEED = 0x5EED


def hadamard_matrix(dtype: torch.dtype = torch.float32, size: int = SIZE,
                    signs: bool | torch.Tensor = True) -> torch.Tensor:
    """H = Sylvester Hadamard(size) / sqrt(size), times a diagonal of signs: the fixed
    random ones (True, the NVFP4 recipe's), none (False: the deterministic Hadamard of
    arXiv 2605.09825) or the given +-1 vector (a random Hadamard drawn per GEMM, arXiv
    2502.20586). H H^T = I."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < size:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    if h.shape[0] != size:
        raise ValueError(f"a Sylvester Hadamard matrix has a power-of-two size, not {size}")
    if signs is True:
        gen = torch.Generator().manual_seed(_SIGN_SEED)
        signs = torch.randint(0, 2, (size,), generator=gen).double() * 2 - 1
    if isinstance(signs, torch.Tensor):
        h = signs.double().cpu()[:, None] * h
    return (h / size**0.5).to(dtype)


_H32 = hadamard_matrix(torch.float32)


def hadamard_last_dim(t: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
    """Apply H (default: the 16-point one with fixed random signs) block-diagonally along
    the last dimension, zero-padded to a multiple of its size. The result keeps the padded
    length: the transformed padding is needed for the two operands' product to stay
    unchanged."""
    if h is None:
        h = _H32 if t.dtype == torch.float32 else hadamard_matrix(t.dtype)
    size = h.shape[0]
    n = t.shape[-1]
    pad = -n % size
    h = h.to(t.device, t.dtype)
    v = F.pad(t, (0, pad)) if pad else t
    return (v.reshape(*v.shape[:-1], -1, size) @ h).reshape(v.shape)
