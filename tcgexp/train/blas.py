"""A fast BLAS for MLX on Linux CPUs, loaded before MLX is first imported.

The ``mlx[cpu]`` Linux wheel links a reference BLAS: float32 matmul runs at a
few GFLOP/s, ~50x below what the same cores do with an optimised BLAS. MLX
resolves its BLAS symbols at load time, so loading Intel MKL's single dynamic
library (``libmkl_rt``, PyPI package ``mkl``) with RTLD_GLOBAL *before*
``import mlx.core`` makes MLX use it. ``TCGEXP_BLAS=reference`` turns it off.

MKL_CBWR=AUTO,STRICT asks MKL for bit-reproducible results independent of
buffer alignment, which exact resume (bit-identical weights) relies on.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

_LOADED: str | None = None


def mlx_imported() -> bool:
    return "mlx.core" in sys.modules


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
            ctypes.CDLL(candidates[0], mode=ctypes.RTLD_GLOBAL)
            _LOADED = f"mkl: {candidates[0]}"
    return _LOADED

