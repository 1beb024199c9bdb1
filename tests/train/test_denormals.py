"""MLX's stream thread flushes subnormal floats to zero after ``setup()`` (tcgexp/learn/denormals.py); the calling
thread keeps IEEE subnormals; ``TCGEXP_DENORMALS=keep`` keeps them in MLX too."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from tcgexp.learn import blas

X86_LINUX = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
pytestmark = pytest.mark.skipif(not X86_LINUX, reason="FTZ/DAZ are set on x86-64 Linux only")

# a first moment whose gradient went to zero: 0.1 * 0.9**n, as AdamW computes it (m = beta1 m + (1 - beta1) 0)
DECAY = """
import json
import tcgexp.api
tcgexp.api.setup()
from tcgexp.learn import blas
import mlx.core as mx
m = mx.array([0.1], dtype=mx.float32)
for _ in range(1000):
    m = 0.9 * m + 0.1 * mx.zeros_like(m)
    mx.eval(m)
print(json.dumps({"denormals": blas.DENORMALS, "m": float(m.item())}))
"""


def decayed(**env) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", DECAY], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mlx_computes_half_the_smallest_normal_float_as_zero_and_the_calling_thread_does_not():
    import mlx.core as mx

    assert blas.DENORMALS == "flushed"
    tiny = float(np.finfo(np.float32).tiny)
    assert float(np.array(mx.array([tiny], dtype=mx.float32) * 0.5)[0]) == 0.0
    # Python and numpy on the thread that called setup() keep IEEE subnormals: a tiny setting stays positive
    assert np.float32(tiny) * np.float32(0.5) > 0
    typed = float("1e-320")  # a subnormal double, as a setting typed on the command line parses
    assert typed > 0.0 and typed * 1.0 > 0.0


def test_a_first_moment_with_no_gradient_decays_to_zero_not_to_a_subnormal_that_stays():
    """0.9 times the smallest subnormal rounds back to it: with IEEE subnormals such a moment never leaves the slow
    range (the step ran ~17 % slower from microbatch ~700 on); flushed, it is zero."""
    assert decayed() == {"denormals": "flushed", "m": 0.0}
    kept = decayed(TCGEXP_DENORMALS="keep")
    assert kept["denormals"] == "kept (TCGEXP_DENORMALS=keep)"
    assert 0 < kept["m"] < float(np.finfo(np.float32).tiny)
