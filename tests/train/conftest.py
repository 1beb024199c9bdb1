"""A tiny but real training config: real corpus, planner, caches, MLX steps; tracking off."""
from __future__ import annotations

import pytest

from tests.conftest import TINY, compose_config

TINY_TRAIN = [*TINY, "dataset.rows_per_day=1200", "dataset.row_group_rows=256", "tbptt.chunk=8",
              "tbptt.batch_size=64", "model.hidden=16", "trainer.epochs=2", "tracking=off",
              "checkpoint.latest_every_steps=4", "scheduler.warmup_steps=3"]


@pytest.fixture
def train_cfg(tmp_path):
    """compose(overrides...) for a fast real run; the corpus is shared by the test's runs."""

    def make(*overrides: str, data=None):
        return compose_config(f"dataset.root={data or tmp_path / 'data'}", *TINY_TRAIN, *overrides)

    return make
