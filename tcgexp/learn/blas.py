"""A fast BLAS for MLX on Linux CPUs, loaded before MLX is first imported (``setup``, by the entry points).

The ``mlx[cpu]`` Linux wheel links a reference BLAS: float32 matmul runs at a
few GFLOP/s, ~50x below what the same cores do with an optimised BLAS. MLX
resolves its BLAS symbols at load time, so loading Intel MKL's single dynamic
library (``libmkl_rt``, PyPI package ``mkl``) with RTLD_GLOBAL *before*
``import mlx.core`` makes MLX use it. ``TCGEXP_BLAS=reference`` turns it off.

MKL_CBWR=AUTO,STRICT asks MKL for bit-reproducible results independent of
buffer alignment, which exact resume (bit-identical weights) relies on.

MKL's threads fit the step (``fit_threads``, called by the Stepper with the model's width and path).
On the fused path (tcgexp/kernels) with two cores or more, MKL runs one thread and the kernels share
the cores themselves (``spare_core``): every product of a few hundred thousand multiply-adds or more
is split by rows over the stream's thread and a helper, the scan by lanes, and the weight gradients
go to the helper whole; with MKL_CBWR=AUTO,STRICT each element of a product comes out the same
whatever block of rows a call computes, so the split keeps the pure step's bits. On the pure path
the products are MLX's: MKL runs one thread below hidden 256 (products of ~17 MFLOP at most: MLX
already runs two threads of its own, the Python thread building the graph and the stream thread
executing it, and idle OpenMP threads spin for 200 ms after every product), more from 256 on.
A MKL_NUM_THREADS the user set (or ``launch.share_cores`` set for ranks) wins, and then the fused
pass stays on one thread.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

from ..launch import share_cores
from .denormals import flush_in_mlx

_LOADED: str | None = None


def mlx_imported() -> bool:
    return "mlx.core" in sys.modules


_MKL: ctypes.CDLL | None = None
DENORMALS: str | None = None  # what setup() left MLX's stream thread with (tcgexp/learn/denormals.py)
_USER_THREADS = False  # MKL_NUM_THREADS was set before tcgexp loaded MKL


def mkl_threads(hidden: int, cores: int | None = None) -> int:
    """MKL threads for a model of width `hidden`: one below 256 (products of ~17 MFLOP at most,
    ~0.2 ms: fork and join and the spinning threads cost more than they save), else up to 4."""
    cores = cores or os.cpu_count() or 1
    return 1 if hidden < 256 else max(1, min(4, cores))


def fit_threads(hidden: int, shared: bool = False) -> int | None:
    """Set MKL's thread count for a model of width `hidden` (unless the user set MKL_NUM_THREADS): one where
    the fused step shares the cores itself (`shared`), else ``mkl_threads``; returns the count set, or None
    (no MKL, or the user's choice stands)."""
    if _MKL is None or _USER_THREADS:
        return None
    n = 1 if shared else mkl_threads(hidden)
    _MKL.MKL_Set_Num_Threads(n)
    return n


def spare_core() -> bool:
    """Whether the fused step may share its pass with a second thread (tcgexp/kernels/csrc/helper.h): tcgexp
    sets MKL's threads (MKL is loaded and neither the user nor ``launch.share_cores`` set MKL_NUM_THREADS), and
    this process may use two cores or more. The helper takes work only when it gets a core (whatever it has not
    taken when the stream's thread needs it, that thread runs itself), so a busy machine costs it the hand-over,
    not a wait."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return _MKL is not None and not _USER_THREADS and cores >= 2


def setup() -> str:
    """Set this process up for training, once, before anything imports MLX: each launched rank's share of the
    cores' BLAS threads (``launch.share_cores``), then MKL loaded (unless TCGEXP_BLAS=reference, another OS, or
    no MKL). Returns what MLX will use ("mkl: <path>" or why not). The entry points call it when they run
    (``tcgexp-train``'s task, ``tcgexp-bench``, ``tcgexp.app.compose``, ``tcgexp.api.train``); importing a
    tcgexp module never does. Then MLX's CPU stream thread is started with subnormal floats flushed to zero
    (``denormals.flush_in_mlx``: ``DENORMALS`` says whether it holds)."""
    global _LOADED, _MKL, _USER_THREADS, DENORMALS
    if _LOADED is not None:
        return _LOADED
    share_cores()  # ranks of one mlx.launch on one host: each its share of the cores' BLAS threads
    choice = os.environ.get("TCGEXP_BLAS", "mkl").lower()
    if sys.platform != "linux":
        _LOADED = "platform BLAS (not Linux)"
    elif choice in ("reference", "off", "0", "none"):
        _LOADED = "reference BLAS (TCGEXP_BLAS=reference)"
    elif mlx_imported():
        _LOADED = LATE
    else:
        candidates = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
        if not candidates:
            _LOADED = "reference BLAS (libmkl_rt not found: pip install mkl)"
        else:
            os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")  # read by MKL when it starts, here and in children
            _USER_THREADS = "MKL_NUM_THREADS" in os.environ
            _MKL = ctypes.CDLL(candidates[0], mode=ctypes.RTLD_GLOBAL)
            _LOADED = f"mkl: {candidates[0]}"
    DENORMALS = flush_in_mlx()  # imports MLX: after MKL, which MLX binds when it loads
    return _LOADED


LATE = "reference BLAS (mlx.core was imported before tcgexp could load MKL)"


class BlasError(RuntimeError):
    """MLX was loaded before tcgexp's set-up, so it is bound to its bundled reference BLAS for good."""


def require() -> str:
    """``setup()``, refusing a process whose MLX was loaded before it could load MKL: MLX binds its BLAS when
    mlx.core is first imported, so such a process would train on the reference BLAS (~50x slower matrix
    products, and other bits than a run set up first computes). Returns what the run records as its arithmetic:
    the BLAS and whether MLX flushes subnormals ("mkl: <path>; subnormals flushed")."""
    loaded = setup()
    if loaded == LATE:
        raise BlasError(
            "mlx.core was imported before tcgexp set up MKL, so MLX is bound to its bundled reference BLAS: call "
            "tcgexp.api.setup() before anything imports mlx (first thing in the script, or in conftest.py), or "
            "set TCGEXP_BLAS=reference to train on that BLAS anyway"
        )
    # what a run records as its arithmetic (result.json, each checkpoint): the BLAS and whether MLX flushes
    # subnormals, since either changes the bits a resumed run must match
    return f"{loaded}; subnormals {DENORMALS}"
