"""Keep freed memory in the process heap (glibc), so a training step's temporaries are
not page-faulted in again on every step.

A training step allocates the same few hundred temporaries every step; the larger ones
(a 512x256 float32 tensor is 512 KiB) sit above glibc's mmap threshold or at the top of
the heap, so by default they go back to the kernel when freed and come back as fresh
zeroed pages. On CPU that made the fake-quant passes several times slower than the
arithmetic (measured in benchmarks/RESULTS.md, precision section). Raising the mmap
threshold to its maximum and turning off heap trimming keeps that memory in the process:
a run's peak memory stays allocated until it ends, nothing else changes (numerics are
untouched)."""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's upper limit on 64-bit
_TRIM_OFF = 2**31 - 1  # the largest value mallopt takes: never trim

_done = False


def keep_freed_memory() -> bool:
    """Set the heap up for a training process (once; glibc only). Returns whether the
    setting is in effect."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:  # glibc's soname first: find_library runs ldconfig in a subprocess
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False  # not glibc
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # both or neither: a fixed trim threshold alone disables glibc's dynamic mmap
    # threshold and sends every large temporary to mmap (slower than the default)
    if mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1:
        _done = mallopt(_M_TRIM_THRESHOLD, _TRIM_OFF) == 1
    return _done
