"""The fused CPU quantizer (qkernel.c): built with the system C compiler on first use,
cached per machine, called through ctypes.

On the tiny LM a fake quantization with torch ops is a dozen passes over a small
tensor, each paying torch's per-op cost; the fused kernel does the amax pass and one
scale-round-dequantize pass. Its results are bit-identical to the torch path (tested per
mode), so whether a worker has a compiler changes speed, never numerics. Without one
(or with RCPFORGE_QKERNEL=0) everything runs on the torch path, after one warning.
It also makes stochastic rounding's uniform draws (`uniform`): torch.rand's numbers
from a copy of torch's CPU generator, checked against torch.rand once a process.

The library is built with -march=native, so the cache key holds the CPU's feature flags:
a cache directory shared by different machines (a cluster's home) keeps one build per
kind of CPU."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch

from rcpforge.trainers.contract.cache import user_cache
from rcpforge.trainers.precision.formats import ElementFormat

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("qkernel.c")
# No -ffast-math: the kernel must round exactly as torch does. -ffp-contract=off: no
# fused multiply-adds (one rounding where torch does two).
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-trapping-math", "-shared", "-fPIC"]
MODES = {
    "given": 0, "tensor": 1, "fp32": 2, "pow2": 3, "floor": 4, "rceil": 5,
    "nvfp4": 6, "nvfp4_clamped": 7, "nvfp4_4over6": 8, "nvfp4_rowscaled": 9,
    "nvfp4_4over6_mae": 10, "nvfp4_4over6_256": 11, "nvfp4_4over6_mae_256": 12,
}
# Above this many elements a multi-threaded torch would beat the single-threaded kernel.
_MAX_SINGLE_THREAD = 1 << 18

_lib: ctypes.CDLL | None = None
_tried = False
_enabled = os.environ.get("RCPFORGE_QKERNEL", "1") != "0"


def cache_dir() -> Path:
    env = os.environ.get("RCPFORGE_KERNEL_CACHE")
    return Path(env) if env else user_cache("kernels")


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor()


def _build(cc: str) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), version, " ".join(FLAGS), platform.machine(), _cpu_flags()]).encode()
    ).hexdigest()[:16]
    target = cache_dir() / f"qkernel-{key}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home on a cluster node: a private temporary cache
        target = Path(tempfile.gettempdir()) / f"rcpforge-kernels-{os.getuid()}" / target.name
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
    # build beside the target and rename: concurrent workers never load a partial file
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{cc} failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load() -> ctypes.CDLL | None:
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    try:
        if cc is None:
            raise RuntimeError("no C compiler (cc or gcc) on PATH")
        lib = ctypes.CDLL(str(_build(cc)))
    except Exception as err:  # any failure leaves the (identical, slower) torch path
        log.warning("fused quantizer unavailable, using torch ops (same numerics, slower): %s", err)
        return None
    fn = lib.rcpf_quantize
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, i64, i64, ctypes.c_int, f32, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   f32, ptr, ptr, ptr, ptr, ptr]
    fn.restype = None
    fn = lib.rcpf_quantize_t
    fn.argtypes = [ptr, i64, i64, i64, ctypes.c_int, f32, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ptr, ptr, ptr, ptr, ptr]
    fn.restype = ctypes.c_int
    fn = lib.rcpf_epilogue
    fn.argtypes = [ptr, ptr, i64, i64, f32, ctypes.c_int, ptr, ptr, ptr]
    fn.restype = None
    fn = lib.rcpf_uniform
    fn.argtypes = [ptr, i64, ptr]
    fn.restype = None
    _lib = lib
    return lib


def set_enabled(on: bool) -> bool:
    """Use the fused kernel (True) or the torch path; returns the previous setting."""
    global _enabled
    old, _enabled = _enabled, on
    return old


def available() -> bool:
    return _enabled and _load() is not None


def usable(x: torch.Tensor) -> bool:
    """Whether the fused kernel takes this tensor (a CPU float32 tensor, the library
    built, and small enough or torch on one thread)."""
    return (
        _enabled and x.is_cpu and x.dtype == torch.float32
        and (x.numel() <= _MAX_SINGLE_THREAD or torch.get_num_threads() == 1)
        and _load() is not None
    )


# Generator.get_state() of torch's CPU generator: seed, left, seeded, next, 624 words, the
# normal-sample caches (see qkernel.c's rcpf_uniform)
_GENERATOR_STATE_BYTES = 5056
# Below this many draws torch.rand's cost is mostly per call, and get/set_state's would
# be more than the draws save.
_MIN_KERNEL_DRAWS = 2048
_draws_checked: bool | None = None


def _c_uniform(n: int, generator: torch.Generator) -> torch.Tensor:
    lib = _load()
    assert lib is not None
    state = generator.get_state()
    out = torch.empty(n)
    lib.rcpf_uniform(state.data_ptr(), n, out.data_ptr())
    generator.set_state(state)
    return out


def _draws_match_torch() -> bool:
    """Whether rcpf_uniform makes torch.rand's numbers and leaves its generator state,
    over each way a draw can meet the engine's twist (before, at and past a 624-word
    boundary, several twists at once). Checked once a process: a torch whose generator
    changed would only make the draws slower (torch.rand), never different."""
    ours, theirs = torch.Generator().manual_seed(20261202), torch.Generator().manual_seed(20261202)
    for n in (1, 622, 1, 1, 2000, 624, 624, 5000, 3):
        if not torch.equal(_c_uniform(n, ours), torch.rand(n, generator=theirs)):
            return False
    return torch.equal(ours.get_state(), theirs.get_state())


def uniform(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None) -> torch.Tensor:
    """torch.rand(shape, generator=generator, dtype=torch.float32) on the CPU, the same
    numbers and the generator left in the same state, drawn by the fused kernel where it
    is built and the draw is large enough to gain from it."""
    global _draws_checked
    n = math.prod(shape)
    g = torch.default_generator if generator is None else generator
    if n >= _MIN_KERNEL_DRAWS and g.device.type == "cpu" and available():
        if _draws_checked is None:
            ok = g.get_state().numel() == _GENERATOR_STATE_BYTES and _draws_match_torch()
            if not ok:
                log.warning("this torch's CPU generator differs from the fused kernel's copy: "
                            "stochastic rounding draws with torch.rand (same numbers, slower)")
            _draws_checked = ok
        if _draws_checked:
            return _c_uniform(n, g).view(shape)
    return torch.rand(shape, generator=generator, dtype=torch.float32)


class Fused(NamedTuple):
    core: torch.Tensor
    amax: float  # the tensor's amax (per-tensor modes)
    scale: float  # the tensorwise scale (`tensor`) or the NVFP4 global scale
    scales: torch.Tensor | None  # factored: each tile's scale, [tile row, tile column]


def usable_for_epilogue(out: torch.Tensor) -> bool:
    return _enabled and out.is_cpu and out.dim() == 2 and out.is_contiguous() and _load() is not None


def fused_quantize(
    x: torch.Tensor, f: ElementFormat, tile: tuple[int, int], mode: str, *,
    given: float = 1.0, u: torch.Tensor | None = None, factored: bool = False,
) -> Fused:
    """Fake-quantize the 2-D float32 tensor x in tiles of `tile` (see qkernel.c's Mode
    for what each mode scales by and what the core is). `factored` (fp32, pow2): the
    core is the grid values and the tile scales come back to be divided out later."""
    lib = _load()
    assert lib is not None and x.dim() == 2 and (u is None or u.is_contiguous())
    x = x.contiguous()
    rows, cols = x.shape
    core = torch.empty_like(x)
    scales = torch.empty((-(-rows // tile[0]), -(-cols // tile[1]))) if factored else None
    if mode == "nvfp4_rowscaled":  # the encode scale of each row (1-D blocks)
        assert tile[0] == 1
        scales = torch.empty((rows, 1))
    info = (ctypes.c_double * 2)(0.0, 1.0)
    lib.rcpf_quantize(
        x.data_ptr(), rows, cols, tile[0], tile[1], MODES[mode], f.max, f.emin, f.mbits, f.emax,
        given, None if u is None else u.data_ptr(), core.data_ptr(),
        None, ctypes.addressof(info),  # no BF16 copy: a CPU's BF16 GEMMs take the FP32 core
        None if scales is None else scales.data_ptr(),
    )
    return Fused(core, info[0], info[1], scales)


def fused_quantize_t(
    x: torch.Tensor, f: ElementFormat, block: int, mode: str, *,
    u: torch.Tensor | None = None, factored: bool = False,
) -> Fused:
    """fused_quantize of x in 1-D blocks along its last dimension (a block mode), for an
    x whose transpose is contiguous (`w.t()`, `dy.t()`): the kernel reads the original
    memory column by column, with no transposed copy. The results are views of the
    same layout as x (`scales` too: [row of x, block])."""
    lib = _load()
    orig = x.t()
    assert lib is not None and x.dim() == 2 and orig.is_contiguous() and mode in MODES
    rows, cols = orig.shape
    core = torch.empty_like(orig)
    scales = torch.empty((-(-rows // block), cols)) if factored else None
    info = (ctypes.c_double * 2)(0.0, 1.0)
    if lib.rcpf_quantize_t(
        orig.data_ptr(), rows, cols, block, MODES[mode], f.max, f.emin, f.mbits, f.emax,
        None if u is None else u.data_ptr(), core.data_ptr(),
        None, ctypes.addressof(info),  # no BF16 copy: a CPU's BF16 GEMMs take the FP32 core
        None if scales is None else scales.data_ptr(),
    ):
        raise MemoryError(f"fused quantizer: no memory for {cols} column scales")
    return Fused(core.t(), info[0], info[1],
                 None if scales is None else scales.t())


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def epilogue(
    out: torch.Tensor, factor: float, row_div: torch.Tensor | None, col_div: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """`out.float() * factor / row_div / col_div + bias` for a BF16 GEMM output, in one
    pass with torch's roundings (a factor of 1 is skipped, as linear._mm skips it).
    row_div holds one value per row of out, col_div and bias one per column."""
    lib = _load()
    assert lib is not None and out.dtype == torch.bfloat16 and out.is_contiguous() and out.dim() == 2
    rows, cols = out.shape
    parts = [t if t is None else t.float().contiguous() for t in (row_div, col_div, bias)]
    assert all(p is None or p.numel() == n for p, n in zip(parts, (rows, cols, cols)))
    result = torch.empty((rows, cols), dtype=torch.float32)
    lib.rcpf_epilogue(out.data_ptr(), result.data_ptr(), rows, cols, factor, factor != 1.0,
                      *(_ptr(p) for p in parts))
    return result
