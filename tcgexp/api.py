"""The plug-in surface: everything an option written outside tcgexp, and its tests, import, from one place.

An option of your own (a cache policy, a schedule, a model, an optimizer, a tracker) is one class
with its schema beside it and one YAML, in a package on Hydra's search path
(``hydra.searchpath=[pkg://my_options]``)::

    from tcgexp.api import Policy, PolicyConfig, schema, within

    @schema("cache.policy", "mru")           # my_options/cache/mru.yaml: defaults: [/schema.cache.policy.mru, _self_]
    class MruConfig(PolicyConfig):
        spare: int = 0
        CHECKS: ClassVar[tuple] = (("spare", within(0, 64), "in [0, 64]"),)

Its tests compose and train with ``compose``/``option``/``train`` and expect ``ConfigError`` for a
refused value. These names keep this import path whatever moves inside tcgexp (``tests/test_plugins.py``
imports nothing else); the docs' "Extending" page shows each kind of option.
"""

from __future__ import annotations

from .app import compose, option
from .cache.policy import Policy, PolicyConfig
from .cache.rowgroup import CacheConfig
from .errors import ConfigError
from .schema import ALL, FLOAT32_MAX, INT32_MAX, schema, validate, within
from .track import NullTracker, Tracker, TrackingConfig
from .train import train
from .train.checkpoint import CheckpointError
from .train.model import ModelConfig, RecurrentPolicy
from .train.optim import OptimizerConfig, scaled
from .train.schedule import Schedule, SchedulerConfig

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
    # an option's tests: compose, train, and what a refused resume raises
    "compose",
    "option",
    "train",
    "CheckpointError",
]
