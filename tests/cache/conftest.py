"""A real two-day corpus (about 14 row groups a day), built once per session."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from tcgexp.data.schema import to_numpy
from tests.conftest import make_corpus

# Scalars of several dtypes and both 2-d list columns (float32 and bool).
COLUMNS = ["episode_id", "side", "substep", "terminal", "features", "action_mask", "label", "aux_return"]


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache_corpus") / "data"
    corpus = make_corpus(
        root, "dataset.days=2", "dataset.rows_per_day=3000", "dataset.row_group_rows=256", build_now=True
    )
    return list(corpus.files)


@pytest.fixture(scope="session")
def all_keys(corpus_files):
    return [(f, rg) for f, path in enumerate(corpus_files) for rg in range(pq.ParquetFile(path).num_row_groups)]


@pytest.fixture(scope="session")
def reference(corpus_files, all_keys):
    """key -> arrays from a direct pyarrow read, independent of the cache."""
    out = {}
    for f, rg in all_keys:
        table = pq.ParquetFile(corpus_files[f]).read_row_group(rg, columns=COLUMNS)
        out[(f, rg)] = to_numpy(table, COLUMNS)
    return out


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype, name
        assert got[name].shape == arr.shape, name
        assert np.array_equal(got[name], arr), name


def spill_dir_bytes(path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


class Probe:
    """An injectable memory probe: tests set .pct to simulate pressure."""

    def __init__(self, pct: float = 10.0) -> None:
        self.pct = pct
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.pct
