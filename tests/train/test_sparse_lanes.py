"""Lane memories in checkpoints: only the lanes a resume needs, restored exactly."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from tcgexp.lifecycle.checkpoint import SparseLanes, _lane_arrays, _lane_tensors


def roundtrip(tmp_path, lanes):
    path = str(tmp_path / "lanes.safetensors")
    mx.save_safetensors(path, _lane_tensors(lanes))
    return _lane_arrays(mx.load(path)), (tmp_path / "lanes.safetensors").stat().st_size


def test_live_lanes_only_and_exact(tmp_path):
    rng = np.random.default_rng(0)
    h = np.zeros((100_000, 128), np.float32)
    live = np.array([3, 17, 99_999])
    h[live] = rng.standard_normal((3, 128)).astype(np.float32)
    h[50] = 1.0  # a finished lane's memory: not live, so not kept (the next epoch resets it)
    got, size = roundtrip(tmp_path, {"train": SparseLanes.of(h, live)})
    want = h.copy()
    want[50] = 0.0
    assert got["train"].dtype == np.float32 and np.array_equal(got["train"], want)
    assert size < 10_000, "three lanes, not a hundred thousand"


def test_dense_array_keeps_its_nonzero_rows_and_old_dense_files_load(tmp_path):
    h = np.zeros((10, 4), np.float32)
    h[[2, 7]] = [[1, 2, 3, 4], [0, 0, -1e-30, 0]]
    got, _ = roundtrip(tmp_path, {"train": h})
    assert np.array_equal(got["train"], h)
    empty, _ = roundtrip(tmp_path, {"train": SparseLanes.of(h, np.empty(0, np.int64))})
    assert np.array_equal(empty["train"], np.zeros_like(h))
    mx.save_safetensors(str(tmp_path / "old.safetensors"), {"train": mx.array(h)})  # before issue 14
    assert np.array_equal(_lane_arrays(mx.load(str(tmp_path / "old.safetensors")))["train"], h)
