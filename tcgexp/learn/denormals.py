"""Subnormal floats flushed to zero in the thread that runs MLX's CPU work (x86-64 Linux), as XLA and oneDNN do.

Why: AdamW's first moment of a weight whose gradient has gone to exactly zero (a unit that no longer fires)
shrinks by beta1 at every step, enters the subnormal range after ~770 steps and stays there (0.9 times the
smallest subnormal rounds back to it). An x86 core takes a slow path on every operation that reads or makes a
subnormal: on the 5d corpus at hidden 128, half the first moments of the encoder's second layer were subnormal
after one epoch, and the bare step ran 97-100k rows/s over its first 650 microbatches and 79-82k from ~700 on,
for good (docs/benchmarks.md). With FTZ (flush to zero) and DAZ (denormals are zero) such values are zero, and
the step keeps its speed.

How: the SSE control register (MXCSR) belongs to a thread, and a new thread starts with its creator's. MLX
starts the thread that runs a Python thread's CPU stream when that thread first evaluates. ``flush_in_mlx``
sets FTZ and DAZ on the calling thread, evaluates once (so MLX's stream thread starts with them; the fused
kernels' helper thread, which that thread starts, inherits them), restores the calling thread's own register,
and checks the result: half the smallest normal float32, computed by MLX, must come out zero. Python and numpy on
the calling thread keep IEEE subnormals (1e-320 still compares greater than zero); every MLX computation of this
thread's default stream flushes them, the pure and the fused step alike, so the two stay bit-identical.
``TCGEXP_DENORMALS=keep`` keeps subnormals in MLX too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys

FTZ_DAZ = 0x8040  # MXCSR bits 15 (flush to zero) and 6 (denormals are zero)


class _Fenv(ctypes.Structure):
    """glibc's fenv_t on x86-64 (bits/fenv.h): the x87 environment, then MXCSR."""

    _fields_ = [
        ("control_word", ctypes.c_ushort),
        ("reserved1", ctypes.c_ushort),
        ("status_word", ctypes.c_ushort),
        ("reserved2", ctypes.c_ushort),
        ("tags", ctypes.c_ushort),
        ("reserved3", ctypes.c_ushort),
        ("eip", ctypes.c_uint),
        ("cs_selector", ctypes.c_ushort),
        ("opcode", ctypes.c_ushort),  # 11 bits of opcode, 5 reserved
        ("data_offset", ctypes.c_uint),
        ("data_selector", ctypes.c_ushort),
        ("reserved5", ctypes.c_ushort),
        ("mxcsr", ctypes.c_uint),
    ]


def _libm():
    name = ctypes.util.find_library("m")
    return ctypes.CDLL(name) if name else None


def flushes_in_mlx() -> bool:
    """Whether MLX, on this thread's CPU stream, computes half the smallest normal float32 as zero."""
    import mlx.core as mx
    import numpy as np

    tiny = float(np.finfo(np.float32).tiny)
    return float(np.array(mx.multiply(mx.array([tiny], dtype=mx.float32), 0.5, stream=mx.cpu))[0]) == 0.0


def flush_in_mlx() -> str:
    """Start MLX's CPU stream thread for the calling thread with subnormals flushed (see the module's docstring);
    returns what holds: "flushed", or "kept (<why>)"."""
    if os.environ.get("TCGEXP_DENORMALS", "flush").lower() in ("keep", "0", "off", "no"):
        return "kept (TCGEXP_DENORMALS=keep)"
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"kept (not x86-64 Linux: {sys.platform} {platform.machine()})"
    libm = _libm()
    if libm is None:
        return "kept (no libm to set the SSE control register)"
    own = _Fenv()
    if libm.fegetenv(ctypes.byref(own)) != 0:
        return "kept (fegetenv failed)"
    flushing = _Fenv.from_buffer_copy(own)
    flushing.mxcsr |= FTZ_DAZ
    libm.fesetenv(ctypes.byref(flushing))
    try:
        import mlx.core as mx

        # MLX's CPU stream thread starts here, inheriting FTZ/DAZ (the CPU's, whatever the default device)
        mx.eval(mx.add(mx.array([1.0], dtype=mx.float32), 1.0, stream=mx.cpu))
    finally:
        libm.fesetenv(ctypes.byref(own))  # this thread's Python and numpy keep IEEE subnormals
    if flushes_in_mlx():
        return "flushed"
    return "kept (MLX's stream thread had started before tcgexp's set-up)"
