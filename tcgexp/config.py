"""Composing and checking configs: the schemas registered, ``compose``, ``option``, ``build``, ``validate``.

The schemas themselves (defaults and checks) live in ``tcgexp.schema``;
``register_configs()`` stores them in Hydra's ConfigStore on import of this
module, which every entry point imports before ``@hydra.main`` composes.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from .launch import launch_time, rank_suffix
from .sweep.config import HalvingSweeperConfig

from .schema import (  # noqa: F401  (re-exported: the schemas are part of this module's interface)
    GROUPS, OPTION_SCHEMAS, AdamWConfig, AimRemoteTrackingConfig, AimTrackingConfig, CacheConfig, CheckpointConfig,
    Config, DataAction, DataAppConfig, DatasetConfig, FlatCacheConfig, Hot60CacheConfig, Hot60PolicyConfig,
    LoaderConfig, ModelConfig, OffTrackingConfig, OptimizerConfig, PolicyConfig, ReplayConfig, SchedulerConfig,
    SGDConfig, StorageConfig, TbpttConfig, TrackingConfig, TrainerConfig)

# Hydra's configs: an installed tcgexp carries conf/ as the package tcgexp.conf, next to this file (setup.py);
# a source checkout (editable installs too) has it at the repository's top level.
CONF_DIR = Path(__file__).resolve().parent / "conf"
if not (CONF_DIR / "config.yaml").is_file():
    CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(name="base_data_app", node=DataAppConfig)
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)
    for group, name, schema in OPTION_SCHEMAS:
        cs.store(group=group, name=f"base_{name}", node=schema)
    cs.store(name="base_replay", node=ReplayConfig)
    cs.store(group="hydra/sweeper", name="base_halving", node=HalvingSweeperConfig)  # hydra/sweeper=halving
    register_sweeper()


def register_sweeper() -> None:
    """Hydra finds sweepers by walking the ``hydra_plugins`` namespace, which an editable install made by a
    PEP 660 finder hides from the walk (it maps imports, lists no folders); registering the class, Hydra's
    own API for that, makes ``hydra/sweeper=halving`` work whichever way tcgexp was installed."""
    from hydra.core.plugins import Plugins
    from hydra_plugins.tcgexp_sweepers.halving import HalvingSweeper

    Plugins.instance().register(HalvingSweeper)


register_configs()


# Hydra's ${now:} differs between the ranks of one mlx.launch by however long they took to start:
# ${launch_now:} is rank 0's clock on every rank, so they share one run dir; a plain run is unchanged.
# ${rank_suffix:} keeps each rank's job log its own (train.log, train.rank1.log, ...).
OmegaConf.register_new_resolver("launch_now", lambda pattern: launch_time().strftime(pattern), use_cache=True,
                                replace=True)
OmegaConf.register_new_resolver("rank_suffix", rank_suffix, replace=True)


def build(node, *args, **kwargs):
    """``hydra.utils.instantiate``, re-raising our own errors unwrapped.

    Hydra wraps whatever a ``_target_`` raises in InstantiationException; a
    DataError (or any ValueError of ours) already names the key and the fix, so
    the user gets it as it is.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, *args, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError) and type(cause).__module__.startswith("tcgexp."):
            raise cause from None
        raise


def option(group: str, name: str, *overrides: str) -> DictConfig:
    """One option of a config group as the train config composes it, e.g. ``option("cache", "lru", "cache.capacity=4")``."""
    return compose(f"{group}={name}", *overrides)[group]


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with overrides, outside any ``@hydra.main``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: its search path has conf/ already
        return hydra_compose(config_name=config_name, overrides=list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))





def _leaves(cfg: DictConfig, prefix: str = ""):
    """(dotted key, value) for every leaf of the composed config (the hydra node excluded)."""
    for key in cfg:
        if key == "hydra":
            continue
        node, name = cfg[key], f"{prefix}{key}"
        if isinstance(node, DictConfig):
            yield from _leaves(node, name + ".")
        else:
            yield name, node


class ConfigError(ValueError):
    """A composed config whose values cannot work together: named key, what to change."""


def validate(cfg: DictConfig) -> None:
    """Refuse impossible values before any work starts (types were checked at composition).

    The checks live beside the fields, in each schema's ``CHECKS``; this walks the composed
    config and applies the checks of whatever schema each node was composed from.
    """
    for key, value in _leaves(cfg):  # NaN or infinity in any number trains garbage: refuse it by name
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value} is impossible: it must be a finite number")
    for prefix, node in _nodes(cfg):
        problem = check(OmegaConf.get_type(node), node, prefix)
        if problem:
            raise ConfigError(problem)


def check(schema: type, values, prefix: str = "") -> Optional[str]:
    """The first of `schema`'s CHECKS that `values` (a node or a mapping) fails, as one line; None when all pass.

    Also what a part built outside ``train()`` (a Corpus of ``python -m tcgexp.data``) applies to its
    own arguments, so the checks stay here, beside the fields.
    """
    for name, ok, want in getattr(schema, "CHECKS", ()):
        if name not in values:
            continue
        value = values[name]
        try:
            passed = ok(value) if value is not None or name in getattr(schema, "NULLABLE", ()) else False
        except TypeError:  # a value of another type (a tracker's own knob): not ours to judge
            passed = False
        if not passed:
            return f"{prefix}{name}={value!r} is impossible: it must be {want}"
    return None


def _nodes(cfg: DictConfig, prefix: str = ""):
    """(dotted prefix, node) for every config node, the root first (the hydra node excluded)."""
    yield prefix, cfg
    for key in cfg:
        if key != "hydra" and isinstance(cfg._get_node(key), DictConfig) and not OmegaConf.is_missing(cfg, key):
            yield from _nodes(cfg[key], f"{prefix}{key}.")
