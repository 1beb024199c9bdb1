"""The plug-in surface: everything an option written outside tcgexp, and its tests, import, from one place.

An option of your own (a cache policy, a schedule, a model, an optimizer, a tracker) is one class
with its schema beside it and one YAML, in a package on Hydra's search path
(``hydra.searchpath=[pkg://my_options]``)::

    from tcgexp.api import Policy, PolicyConfig, schema, within

    @schema("cache.policy", "mru")           # my_options/cache/mru.yaml: defaults: [/schema.cache.policy.mru, _self_]
    class MruConfig(PolicyConfig):
        spare: int = 0
        CHECKS: ClassVar[tuple] = (("spare", within(0, 64), "in [0, 64]"),)

A game of your own is one object of the ``Game`` protocols (``SimulatedGame``: days played from a seed;
``EpisodeGame``: days read from episode files), ``register``ed (or named ``dataset.game=package.module:ATTR``);
its ``arena()`` (an ``Arena``: its ``Player``s against the trained network, a ``Tally`` each, ``counted`` with
``wilson``'s interval) is what ``eval`` plays.

Its tests compose and train with ``compose``/``option``/``train`` and expect ``ConfigError`` for a
refused value. These names keep this import path whatever moves inside tcgexp (``tests/test_plugins.py``
imports nothing else); the docs' "Extending" page shows each kind of option.

Importing it loads no MLX and changes nothing in the process. The names built on MLX (``RecurrentPolicy``,
``Schedule``, ``scaled``) load it when first asked for; ``compose`` and ``train`` set up MKL first when they run
(MLX binds its BLAS when it loads), so a script or test that needs MLX before either calls ``setup()`` first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .app import compose, option
from .cache.policy import Policy, PolicyConfig
from .cache.rowgroup import CacheConfig
from .errors import ConfigError
from .games.base import EpisodeGame, Game, SimulatedGame
from .games.play import Arena, EvalSettings, Player, WeightsRefused
from .games.registry import register
from .learn.blas import setup
from .learn.configs import ModelConfig, OptimizerConfig, SchedulerConfig
from .lifecycle.ckpt_files import CheckpointError
from .schema import ALL, FLOAT32_MAX, INT32_MAX, schema, validate, within
from .track import NullTracker, Tracker, TrackingConfig
from .train import train
from .winrate import Tally, counted, wilson

if TYPE_CHECKING:  # for readers and type checkers; at run time __getattr__ below loads them
    from .learn.model import RecurrentPolicy
    from .learn.optim import scaled
    from .learn.schedule import Schedule

# names whose modules import MLX: loaded when first asked for (``from tcgexp.api import RecurrentPolicy``), so
# that importing the plug-in surface never binds MLX to a BLAS before ``setup`` could load MKL
ON_MLX = {"RecurrentPolicy": "tcgexp.learn.model", "Schedule": "tcgexp.learn.schedule", "scaled": "tcgexp.learn.optim"}


def __getattr__(name: str) -> Any:
    if name in ON_MLX:
        return getattr(importlib.import_module(ON_MLX[name]), name)
    raise AttributeError(f"module 'tcgexp.api' has no attribute {name!r}")


__all__ = [
    # declaring an option's schema and checking values
    "schema",
    "within",
    "validate",
    "ALL",
    "FLOAT32_MAX",
    "INT32_MAX",
    "ConfigError",
    # the groups' base schemas and classes an option extends
    "CacheConfig",
    "PolicyConfig",
    "Policy",
    "SchedulerConfig",
    "Schedule",
    "ModelConfig",
    "RecurrentPolicy",
    "OptimizerConfig",
    "scaled",
    "TrackingConfig",
    "Tracker",
    "NullTracker",
    # a game of your own (docs/extending.md): what it is, its players and its arena, how it counts, registering it
    "Game",
    "SimulatedGame",
    "EpisodeGame",
    "Player",
    "Arena",
    "EvalSettings",
    "WeightsRefused",
    "Tally",
    "counted",
    "wilson",
    "register",
    # an option's tests: set up, compose, train, and what a refused resume raises
    "setup",
    "compose",
    "option",
    "train",
    "CheckpointError",
]
