"""A damaged kernel in MLX's own cache of compiled CPU kernels ends a run with one line saying what to delete.

MLX writes each compiled graph's shared library into ``$TMPDIR/mlx/<version>/cpu/`` and loads it from
there in every later process; a process killed while its compiler wrote one leaves a truncated file
(seen here after SIGKILLing a sweep's workers: every later run failed with a traceback ending in
"Could not load C++ shared library ...: file too short").
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import TINY
from tests.sweep.conftest import ROOT

pytestmark = pytest.mark.slow  # two real runs (~30 s)


def test_a_truncated_kernel_in_mlx_cache_is_one_line_naming_the_folder(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.train",
        *TINY,
        f"dataset.root={tmp_path / 'data'}",
        "trainer.epochs=1",
        "tracking=off",
        "trainer.kernels=pure",
    ]  # the pure step: MLX compiles its fused elementwise graphs
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    first = subprocess.run(
        [*cmd, f"hydra.run.dir={tmp_path / 'a'}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr[-3000:]
    kernels = sorted((tmpdir / "mlx").rglob("*.so"))
    assert kernels, "MLX compiled no kernel into TMPDIR"
    for so in kernels:  # what a compiler killed half-way leaves
        so.write_bytes(so.read_bytes()[:100])
    again = subprocess.run(
        [*cmd, f"hydra.run.dir={tmp_path / 'b'}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 1, again.stderr[-3000:]
    assert "Traceback" not in again.stderr, again.stderr[-3000:]
    [line] = [ln for ln in again.stderr.splitlines() if ln.startswith("error:")]
    assert "MLX could not load its compiled kernel" in line and f"delete {kernels[0].parent} " in line, line
