"""One fixture composes the real config (conf/) with tiny overrides."""
from __future__ import annotations

from pathlib import Path

import pytest

from tcgexp.train.blas import load_fast_blas

# before any test module imports mlx.core: every test then runs the BLAS a user's run does
BLAS = load_fast_blas()

from tcgexp.config import CONF_DIR as CONF  # noqa: E402,F401  (re-exported to the tests)
from tcgexp.config import build, compose  # noqa: E402
TINY = ["dataset.rows_per_day=500", "dataset.episodes_per_shard=2", "dataset.row_group_rows=128",
        "dataset.workers=1"]


def compose_config(*overrides: str, config_name: str = "config"):
    return compose(*overrides, config_name=config_name)


@pytest.fixture
def cfg_factory(tmp_path):
    """compose(overrides...) with the dataset rooted in this test's tmp dir and sized tiny."""

    def make(*overrides: str, root: Path | None = None, config_name: str = "config"):
        root = root or tmp_path / "data"
        return compose_config(f"dataset.root={root}", *TINY, *overrides, config_name=config_name)

    return make


def make_corpus(root: Path, *overrides: str, build_now: bool = False):
    """The real dataset config, tiny (TINY), rooted at `root`; later overrides win."""
    corpus = build(compose(f"dataset.root={root}", *TINY, *overrides).dataset)
    if build_now:
        corpus.build()
    return corpus
