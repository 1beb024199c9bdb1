"""The spill's one-read archive reader against numpy's own: the same arrays for whatever np.savez writes,
and a refusal (never an unpickle) for what it must not read."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from tcgexp.cache.npz import read_npz

ARRAYS = {
    "float32_2d": np.arange(12, dtype=np.float32).reshape(3, 4),
    "fortran": np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4)),
    "bool": np.array([True, False, True]),
    "int8_big_endian": np.arange(5, dtype=">i4"),
    "scalar": np.array(7, dtype=np.int64),
    "empty": np.zeros((0, 173), dtype=np.float32),
    "strided": np.arange(20, dtype=np.int16)[::3],
    "structured": np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
    "unicode": np.array(["ab", "cde"]),
}


def saved(tmp_path, arrays, writer=np.savez):
    path = tmp_path / "a.npz"
    with open(path, "wb") as fh:
        writer(fh, **arrays)
    return path


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_it_reads_what_np_load_reads(name, tmp_path):
    path = saved(tmp_path, {name: ARRAYS[name], "other": np.ones(5, np.float32)})
    got = read_npz(path, path.stat().st_size)
    with np.load(path, allow_pickle=False) as npz:
        for key in npz.files:
            want = npz[key]
            assert got[key].dtype == want.dtype and got[key].shape == want.shape
            np.testing.assert_array_equal(got[key], want)


@pytest.mark.filterwarnings("ignore:Stored array in format 2.0")  # numpy says so as it writes it
def test_a_header_np_load_would_refuse_as_too_large_is_refused_too(tmp_path):
    """More fields than a format 1.0 header holds (numpy writes format 2.0): np.load(allow_pickle=False) refuses
    a header that large, and so does the spill's reader."""
    wide = np.zeros(2, dtype=[(f"field_{i:05d}", "<f4") for i in range(5000)])
    path = saved(tmp_path, {"wide": wide})
    with pytest.raises(ValueError, match="large"), np.load(path, allow_pickle=False) as npz:
        npz["wide"]
    with pytest.raises(ValueError, match="large"):
        read_npz(path, path.stat().st_size)


@pytest.mark.parametrize(
    "bad",
    ["object", "compressed", "not_npy", "short_size", "long_size", "garbage"],
)
def test_what_it_must_not_read_is_refused(bad, tmp_path):
    if bad == "object":
        path = saved(tmp_path, {"x": np.array([{"a": 1}, None], dtype=object)})
    elif bad == "compressed":
        path = saved(tmp_path, {"x": np.ones(100)}, np.savez_compressed)
    elif bad == "not_npy":
        path = tmp_path / "a.npz"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x.txt", "hello")
    else:
        path = saved(tmp_path, {"x": np.ones(100)})
    size = path.stat().st_size + {"short_size": -1, "long_size": 1}.get(bad, 0)
    if bad == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(size))
    with pytest.raises((ValueError, zipfile.BadZipFile)):
        read_npz(path, size)
