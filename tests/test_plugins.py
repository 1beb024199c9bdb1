"""A new option with settings, in any group, is one class (its schema beside it) and one YAML, from outside tcgexp.

The options live in a folder outside the repository: a Python package on the path, its YAML files
inside it, the package on Hydra's search path (``hydra.searchpath=[pkg://my_options]``: Hydra imports
the package to read its configs, which registers its schemas). Each composes typed
by its own schema, is refused by name on a bad value (its CHECKS), trains, and resumes bit-exactly
(its schedule and optimizer state saved and restored with no code of its own, its settings pinned by
the resume without a list naming them). The docs' Extending page runs its own package the same way
(tests/test_extending.py).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hydra.errors import ConfigCompositionException
from mlx.utils import tree_flatten
from omegaconf import OmegaConf

from tcgexp.api import CheckpointError, ConfigError, compose, train, validate
from tests.train.conftest import TINY_TRAIN

MODULE = '''
"""A user's own options: a cache policy, a schedule, a model, an optimizer and a tracker, each with settings."""
import json
import math
from dataclasses import field
from typing import ClassVar, Optional

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim

from tcgexp.api import (ModelConfig, NullTracker, OptimizerConfig, Policy, PolicyConfig, RecurrentPolicy, Schedule,
                        SchedulerConfig, TrackingConfig, scaled, schema, within)


@schema("cache.policy", "mru")
class MruConfig(PolicyConfig):
    spare: int = 0  # the newest row groups never evicted
    CHECKS: ClassVar[tuple] = (("spare", within(0, 64), "in [0, 64]"),)


class MruPolicy(Policy):
    """Evict the most recently used row group but the `spare` newest."""

    name = "mru"

    def __init__(self, capacity, *, spare):
        super().__init__(capacity)
        self.spare = spare

    def on_hit(self, key):
        self._resident.move_to_end(key)
        return False

    def victim(self, incoming=None):
        keys = list(self._resident)
        return keys[-1 - self.spare] if len(keys) > self.spare else None


@schema("scheduler", "step")
class StepConfig(SchedulerConfig):
    gamma: float = 0.5  # the factor at each drop
    drops: int = 3  # drops over the horizon
    CHECKS: ClassVar[tuple] = SchedulerConfig.CHECKS + (
        ("gamma", within(0.0, 1.0, open_lo=True), "in (0, 1]"), ("drops", within(1, 100), "in [1, 100]"))


class StepDecay(Schedule):
    """Step decay: x gamma `drops` times, evenly over the horizon after warmup."""

    def __init__(self, *, gamma, drops, **base):
        super().__init__(**base)
        self.gamma, self.drops = gamma, drops

    def decay(self, progress):
        floor = mx.floor if isinstance(progress, mx.array) else math.floor
        return self.gamma ** floor(progress * self.drops)


@schema("model", "deep")
class DeepConfig(ModelConfig):
    depth: int = 2  # extra trunk layers
    CHECKS: ClassVar[tuple] = ModelConfig.CHECKS + (("depth", within(1, 8), "in [1, 8]"),)


class DeepPolicy(RecurrentPolicy):
    def __init__(self, feature_dim, action_dim, *, hidden, memory, depth):
        super().__init__(feature_dim, action_dim, hidden=hidden, memory=memory)
        self.trunk = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(),
                                   *[m for _ in range(depth) for m in (nn.Linear(hidden, hidden), nn.ReLU())])


@schema("optimizer", "lion")
class LionConfig(OptimizerConfig):
    betas: list = field(default_factory=lambda: [0.9, 0.99])
    weight_decay: float = 0.0
    CHECKS: ClassVar[tuple] = OptimizerConfig.CHECKS + (
        ("betas", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two values in [0, 1)"),
        ("weight_decay", within(0.0, 1.0), "in [0, 1]"))


class Lion(optim.Lion):
    def __init__(self, schedule, *, lr, betas, weight_decay):
        super().__init__(learning_rate=scaled(lr, schedule), betas=list(betas), weight_decay=weight_decay)


@schema("tracking", "jsonl")
class JsonlConfig(TrackingConfig):
    path: str = "metrics.jsonl"
    every: int = 1  # track every n-th step
    CHECKS: ClassVar[tuple] = (("every", within(1, 1000), "in [1, 1000]"),)


class JsonlTracker(NullTracker):
    def __init__(self, *, path, every, experiment, hparams, context, resume_hash=None):
        self.path, self.every = path, every

    def track(self, values, *, step, epoch=None, context=None):
        if step % self.every == 0:
            with open(self.path, "a") as fh:
                fh.write(json.dumps({"step": step, **values}) + "\\n")
'''

YAMLS = {
    "cache/mru.yaml": """
        defaults:
          - /schema.cache.policy.mru@policy
          - _self_
        _target_: tcgexp.cache.RowGroupCache
        policy:
          _target_: my_options.MruPolicy
        capacity: 4
        """,
    "scheduler/step.yaml": """
        defaults:
          - /schema.scheduler.step
          - _self_
        _target_: my_options.StepDecay
        """,
    "model/deep.yaml": """
        defaults:
          - /schema.model.deep
          - _self_
        _target_: my_options.DeepPolicy
        """,
    "optimizer/lion.yaml": """
        defaults:
          - /schema.optimizer.lion
          - _self_
        _target_: my_options.Lion
        lr: 3e-4
        """,
    "tracking/jsonl.yaml": """
        defaults:
          - /schema.tracking.jsonl
          - _self_
        _target_: my_options.JsonlTracker
        """,
}
CHOICES = ["cache=mru", "scheduler=step", "model=deep", "optimizer=lion", "tracking=jsonl"]


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """The user's folder: the package my_options (its classes and schemas in __init__.py, its YAMLs
    in <group>/<option>.yaml), importable from the folder."""
    home = tmp_path_factory.mktemp("outside")
    (home / "my_options").mkdir()
    (home / "my_options" / "__init__.py").write_text(MODULE)
    for name, text in YAMLS.items():
        (home / "my_options" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "my_options" / name).write_text(textwrap.dedent(text))
    sys.path.insert(0, str(home))
    yield home
    sys.path.remove(str(home))
    sys.modules.pop("my_options", None)


def searchpath(home: Path) -> str:
    return "hydra.searchpath=[pkg://my_options]"


SMALL = [o for o in TINY_TRAIN if not o.startswith("tracking=")]


def plugin_cfg(home: Path, data: Path, *more: str):
    return compose(
        searchpath(home),
        *CHOICES,
        f"dataset.root={data}",
        *SMALL,
        f"tracking.path={data.parent / 'metrics.jsonl'}",
        *more,
    )


def test_each_option_composes_typed_by_its_own_schema(outside, tmp_path):
    cfg = plugin_cfg(outside, tmp_path)
    types = {g: OmegaConf.get_type(cfg[g]).__name__ for g in ("scheduler", "model", "optimizer", "tracking")}
    assert types == {
        "scheduler": "StepConfig",
        "model": "DeepConfig",
        "optimizer": "LionConfig",
        "tracking": "JsonlConfig",
    }
    assert OmegaConf.get_type(cfg.cache.policy).__name__ == "MruConfig"
    assert (cfg.scheduler.gamma, cfg.model.depth, cfg.cache.policy.spare, list(cfg.optimizer.betas)) == (
        0.5,
        2,
        0,
        [0.9, 0.99],
    )  # the schemas' defaults: the YAMLs repeat none
    validate(cfg)


@pytest.mark.parametrize(
    "override, key",
    [
        ("scheduler.gamma=0", "scheduler.gamma"),
        ("scheduler.gamma=1.5", "scheduler.gamma"),
        ("scheduler.drops=0", "scheduler.drops"),
        ("model.depth=0", "model.depth"),
        ("model.depth=99", "model.depth"),
        ("cache.policy.spare=-1", "cache.policy.spare"),
        ("optimizer.betas=[0.9]", "optimizer.betas"),
        ("optimizer.betas=[0.9,1.0]", "optimizer.betas"),
        ("tracking.every=0", "tracking.every"),
        ("scheduler.gamma=nan", "scheduler.gamma"),
    ],
)
def test_a_bad_value_is_refused_by_name(outside, tmp_path, override, key):
    with pytest.raises(ConfigError, match=re.escape(f"{key}=")) as err:
        train(plugin_cfg(outside, tmp_path / "data", override), run_dir=tmp_path / "run")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists(), "refused before any work"


@pytest.mark.parametrize("override", ["scheduler.gama=0.3", "model.depth=deep", "cache.policy.spares=1"])
def test_a_misspelt_knob_or_wrong_type_fails_at_composition(outside, tmp_path, override):
    with pytest.raises(ConfigCompositionException) as err:
        plugin_cfg(outside, tmp_path, override)
    assert override.split("=")[0] in str(err.value) + str(err.value.__cause__)


def weights(result) -> dict[str, bytes]:
    return {k: np.array(v).tobytes() for k, v in tree_flatten(result["model"].parameters())}


def test_they_train_and_resume_bit_exactly(outside, tmp_path):
    data = tmp_path / "data"
    more = [
        "scheduler.gamma=0.3",
        "model.depth=1",
        "cache.policy.spare=1",
        "cache.capacity=2",
        "trainer.track_every=1",
    ]  # the jsonl tracker sees every step
    whole = train(plugin_cfg(outside, data, *more), run_dir=tmp_path / "whole")
    assert whole["status"] == "completed" and whole["cache"]["train"]["evictions"] > 0  # the policy chose victims
    assert len(whole["model"].trunk.layers) == 4  # the model's depth
    assert (tmp_path / "metrics.jsonl").read_text().count("train/loss") == whole["processed"]["optimizer_steps"]
    first = train(plugin_cfg(outside, data, *more, "trainer.max_steps=7"), run_dir=tmp_path / "a")
    assert first["status"] == "stopped"
    saved = json.loads((tmp_path / "a" / "checkpoints" / "latest" / "state.json").read_text())
    assert saved["schedule"]["_target_"] == "my_options.StepDecay" and saved["schedule"]["gamma"] == 0.3
    done = train(plugin_cfg(outside, data, *more, f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b")
    assert done["processed"]["optimizer_steps"] == whole["processed"]["optimizer_steps"]
    assert weights(done) == weights(whole), "the resumed run ends bit-identical to the uninterrupted one"
    # the plugins' settings are pinned like tcgexp's own: derived from their schemas
    for change, key in (("scheduler.gamma=0.4", "scheduler.gamma"), ("model.depth=2", "model")):
        with pytest.raises(CheckpointError, match=re.escape(key)):
            train(plugin_cfg(outside, data, *more, change, f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "c")
    # a cache policy's setting changes where bytes come from, never the result: free on resume
    again = train(
        plugin_cfg(outside, data, *more, "cache.policy.spare=0", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "d"
    )
    assert weights(again) == weights(whole)


def test_options_from_outside_and_their_tests_import_tcgexp_only_through_its_api():
    """One documented import path (tcgexp.api) for a plug-in and its tests: this file and the plug-in it writes."""
    import ast

    from tcgexp import api

    for text in (Path(__file__).read_text(), MODULE):
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.ImportFrom) and not node.level:  # `from tcgexp import api` is tcgexp.api
                names = [f"{node.module}.{a.name}" if node.module == "tcgexp" else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            assert all(n == "tcgexp.api" or not n.startswith("tcgexp") for n in names), names
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert not missing and len(api.__all__) == len(set(api.__all__)), missing


def test_a_game_of_your_own_finds_its_protocols_and_counting_in_the_api():
    """What a game written outside tcgexp imports: the Game protocols, Player and Arena, the Tally it returns
    (counted, with wilson's interval), and register."""
    from tcgexp import api

    class Mover:
        def new_episode(self) -> None:
            pass

        def act(self, observation):
            return 0

    assert isinstance(Mover(), api.Player) and not isinstance(object(), api.Player)

    class NoArena:
        def check(self, settings, run_cfg) -> None:
            pass

    assert not isinstance(NoArena(), api.Arena)
    t: api.Tally = api.counted(["win", "draw", "loss", "win"])
    assert (t["games"], t["wins"], t["draws"], t["losses"]) == (4, 2, 1, 1) and t["interval"] == api.wilson(2, 4)
    settings = api.EvalSettings(opponents=["random"], games=2)
    assert settings.games == 2 and settings.load is None
    assert issubclass(api.WeightsRefused, ValueError) and callable(api.register)
    assert {"name", "source", "option_dim"} <= set(api.Game.__annotations__)
    assert api.Game in api.SimulatedGame.__mro__ and api.Game in api.EpisodeGame.__mro__
