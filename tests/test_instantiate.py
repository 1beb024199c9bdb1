"""One way of building objects: every option of every group instantiates into the class its _target_ names
(options from outside conf/: tests/test_plugins.py; the layers' imports: tests/test_layers.py)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from tcgexp.config import build
from tcgexp.games import sim
from tcgexp.plan import LaneIndex
from tcgexp.plan.loader import TRAIN_COLUMNS
from tcgexp.track import NullTracker
from tests.conftest import CONF, compose_config, make_corpus

ROOT = Path(__file__).resolve().parents[1]
BUILT = ["cache", "loader", "tbptt", "scheduler", "model", "optimizer", "tracking", "dataset", "trainer", "checkpoint"]
OPTIONS = [(g, p.stem) for g in BUILT for p in sorted((CONF / g).glob("*.yaml"))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("inst") / "data", build_now=True)


def test_every_option_of_the_built_groups_names_a_target():
    missing = [f"{g}/{o}.yaml" for g, o in OPTIONS if "_target_" not in (CONF / g / f"{o}.yaml").read_text()]
    assert not missing, f"options without a _target_: {missing}"


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_builds_a_real_object_of_its_class(group, option, corpus, tmp_path):
    """Each partial completed with what the trainer supplies; the object is of the class _target_ names."""
    cfg = compose_config(
        f"{group}={option}",
        f"dataset.root={corpus.root}",
        *(["tracking.repo=" + str(tmp_path / "aim")] if option == "aim" else []),
    )
    node = cfg[group]
    made = build(node)
    if isinstance(made, functools.partial):
        index = LaneIndex.of(corpus)
        schedule = build(cfg.scheduler)(run_steps=10)
        runtime = {
            "cache": lambda: made(corpus.files, TRAIN_COLUMNS, spill_dir=tmp_path / "spill", name="train"),
            "loader": lambda: made(
                build(cfg.cache)(corpus.files, TRAIN_COLUMNS, spill_dir=tmp_path / "s"), TRAIN_COLUMNS
            ),
            "tbptt": lambda: made(index),
            "scheduler": lambda: made(run_steps=10),
            "model": lambda: made(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM),
            "optimizer": lambda: made(schedule),
            "tracking": lambda: _tracker(made, cfg, tmp_path),
            "checkpoint": lambda: made(folder=tmp_path / "checkpoints"),
            "trainer": lambda: made(
                checkpoints=build(cfg.checkpoint)(folder=tmp_path / "checkpoints"),
                tracker=NullTracker(),
                run=_run(cfg, tmp_path),
            ),
        }[group]
        made = runtime()
    try:
        assert isinstance(made, get_class(node._target_)), (group, option, type(made))
        if group == "cache":
            assert type(made._policy) is get_class(node.policy._target_)
    finally:
        for close in ("close",):
            if hasattr(made, close) and group in ("cache", "tracking"):
                getattr(made, close)()


def _run(cfg, tmp_path):
    from rich.console import Console

    from tcgexp.lifecycle.distributed import World
    from tcgexp.train.parts import RunContext

    return RunContext(cfg, tmp_path / "run", World(), Console(quiet=True), blas="reference")


def _tracker(made, cfg, tmp_path):
    from tcgexp.track import job_context

    try:  # the tracker signature of the tracking group (hparams, context, resume_hash)
        return made(hparams=OmegaConf.to_container(cfg, resolve=True), context=job_context(tmp_path), resume_hash=None)
    except TypeError:
        return made(cfg, context=job_context(tmp_path), resume_hash=None)
