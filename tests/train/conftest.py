"""A tiny but real training config: real corpus, planner, caches, MLX steps; tracking off."""

from __future__ import annotations

import pytest

from tests.conftest import CABT_DEMO, TINY, compose_config
from tests.train.launched import LONGER, launch, rank_failures, single

TINY_TRAIN = [
    *TINY,
    "dataset.rows_per_day=1200",
    "dataset.row_group_rows=256",
    "tbptt.chunk=8",
    "tbptt.batch_size=64",
    "model.hidden=16",
    "trainer.epochs=2",
    "tracking=off",
    "checkpoint.latest_every_steps=4",
    "scheduler.warmup_steps=3",
]


# the games a run may train on, for tests that hold on both: the built-in simulator (its demo corpus, tiny) and the
# real game (cabt_demo, tiny: the cabt extra; the session's cabt_demo_root), each one's overrides composed last
GAMES = [pytest.param("sim", id="sim"), pytest.param("cabt", id="cabt", marks=pytest.mark.extra("cabt"))]
GAME_DATA = {"sim": [], "cabt": CABT_DEMO}


def game_root(request, game: str, sim_root):
    """Where `game`'s tiny corpus is: `sim_root` (the test's own) for the simulator, the session's cabt_demo_root."""
    return request.getfixturevalue("cabt_demo_root") if game == "cabt" else sim_root


@pytest.fixture(params=["pure", "fused"])
def step_path(request):
    """trainer.kernels for tests that hold on either step path: "pure", and "fused" where tcgexp's
    kernels build and load here (else skipped with the reason; CI's machine has a compiler)."""
    if request.param == "fused":
        from tcgexp.kernels import load

        module, why = load()
        if module is None:
            pytest.skip(f"tcgexp's kernels cannot run here: {why}")
    return request.param


@pytest.fixture
def train_cfg(tmp_path):
    """compose(overrides...) for a fast real run; the corpus is shared by the test's runs."""

    def make(*overrides: str, data=None):
        return compose_config(f"dataset.root={data or tmp_path / 'data'}", *TINY_TRAIN, *overrides)

    return make


# the distributed tests' runs (tests/train/test_distributed*.py): each module builds its own
@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """The tiny training config as command-line overrides, its corpus built once."""
    base = tmp_path_factory.mktemp("dist")
    overrides = [f"dataset.root={base / 'data'}", *TINY_TRAIN]  # (tracking=off)
    built = single([*overrides, "trainer.epochs=1"], base / "warm")
    assert built.returncode == 0, built.stderr[-2000:]
    return base, overrides


@pytest.fixture(scope="module")
def longer(cli):
    """The kill and signal tests' config (its own corpus) and its uninterrupted 2-rank run."""
    base, overrides = cli
    overrides = [*overrides, *LONGER, f"dataset.root={base / 'data_long'}"]
    whole = launch(overrides, base / "whole")
    assert whole.returncode == 0 and not rank_failures(whole.stdout + whole.stderr), whole.stderr[-3000:]
    return base, overrides


@pytest.fixture(scope="module")
def kernels():
    """tcgexp's compiled kernels (test_kernels.py, test_kernel_contract.py), or the test skipped saying why."""
    from tcgexp.kernels import load

    module, why = load()
    if module is None:
        pytest.skip(f"tcgexp's kernels cannot run here: {why}")
    return module
