"""A fast BLAS for MLX on Linux CPUs, loaded before MLX is first imported.

The ``mlx[cpu]`` Linux wheel links a reference BLAS: float32 matmul runs at a
few GFLOP/s, ~50x below what the same cores do with an optimised BLAS. MLX
resolves its BLAS symbols at load time, so loading Intel MKL's single dynamic
library (``libmkl_rt``, PyPI package ``mkl``) with RTLD_GLOBAL *before*
``import mlx.core`` makes MLX use it. ``TCGEXP_BLAS=reference`` turns it off.

MKL_CBWR=AUTO,STRICT asks MKL for bit-reproducible results independent of
buffer alignment, which exact resume (bit-identical weights) relies on.

MKL's threads fit the step's products (``fit_threads``, called by the Stepper with the model's
width): the products are small (a few hundred rows), MLX already runs two threads of its own
(the Python thread building the graph, the stream thread executing it), and idle OpenMP
threads spin for 200 ms after every product. At model.hidden 128 a second MKL thread took a
core from MLX's own and slowed the step; from 256 on the products are large enough to pay for
it (the README's step table). A MKL_NUM_THREADS the user set (or ``launch.share_cores`` set
for ranks) wins. Where MKL runs one thread, the fused step puts the weight gradients' products on
the core it leaves (``spare_core``).
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import Optional

_LOADED: str | None = None


def mlx_imported() -> bool:
    return "mlx.core" in sys.modules


_MKL: ctypes.CDLL | None = None
_USER_THREADS = False  # MKL_NUM_THREADS was set before tcgexp loaded MKL


def mkl_threads(hidden: int, cores: int | None = None) -> int:
    """MKL threads for a model of width `hidden`: one below 256 (products of ~17 MFLOP at most,
    ~0.2 ms: fork and join and the spinning threads cost more than they save), else up to 4."""
    cores = cores or os.cpu_count() or 1
    return 1 if hidden < 256 else max(1, min(4, cores))


def fit_threads(hidden: int) -> Optional[int]:
    """Set MKL's thread count for a model of width `hidden` (unless the user set MKL_NUM_THREADS);
    returns the count set, or None (no MKL, or the user's choice stands)."""
    if _MKL is None or _USER_THREADS:
        return None
    n = mkl_threads(hidden)
    _MKL.MKL_Set_Num_Threads(n)
    return n


def spare_core(threads: Optional[int]) -> bool:
    """Whether the fused step may compute its weight gradients on a second thread (tcgexp/kernels/csrc/helper.h):
    MKL runs one thread because ``fit_threads`` set it so (not the user, nor ``launch.share_cores``), and this
    process may use two cores or more. The helper only takes work when it gets a core, so a busy machine
    costs it nothing but the hand-over."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return threads == 1 and cores >= 2


def load_fast_blas() -> str:
    """Load MKL if available and allowed; return what MLX will use ("mkl: <path>" or why not)."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    choice = os.environ.get("TCGEXP_BLAS", "mkl").lower()
    if sys.platform != "linux":
        _LOADED = "platform BLAS (not Linux)"
    elif choice in ("reference", "off", "0", "none"):
        _LOADED = "reference BLAS (TCGEXP_BLAS=reference)"
    elif mlx_imported():
        _LOADED = "reference BLAS (mlx.core was imported before tcgexp could load MKL)"
    else:
        candidates = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
        if not candidates:
            _LOADED = "reference BLAS (libmkl_rt not found: pip install mkl)"
        else:
            os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
            global _MKL, _USER_THREADS
            _USER_THREADS = "MKL_NUM_THREADS" in os.environ
            _MKL = ctypes.CDLL(candidates[0], mode=ctypes.RTLD_GLOBAL)
            _LOADED = f"mkl: {candidates[0]}"
    return _LOADED

