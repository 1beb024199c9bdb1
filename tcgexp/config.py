"""Composing and checking configs: the schemas registered, ``compose``, ``option``, ``build``, ``validate``.

The schemas (each knob's one default and its checks) live beside the classes
they configure and register themselves (``tcgexp.schema``); importing the
modules below is registering tcgexp's own. ``register_configs()`` does it for
``compose`` and for every entry point before ``@hydra.main`` composes.
"""
from __future__ import annotations

import importlib
import math
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from .launch import launch_time, rank_suffix
from .schema import ConfigError, check  # noqa: F401  (re-exported: part of this module's interface)

# Hydra's configs: an installed tcgexp carries conf/ as the package tcgexp.conf, next to this file (setup.py);
# a source checkout (editable installs too) has it at the repository's top level.
CONF_DIR = Path(__file__).resolve().parent / "conf"
if not (CONF_DIR / "config.yaml").is_file():
    CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# tcgexp's modules holding schemas (the apps' roots, every group's and every option's): each registers its
# own on import. A module outside tcgexp does the same when Hydra's search path names it (structured://...).
SCHEMA_MODULES = ("tcgexp.data.corpus", "tcgexp.cache.rowgroup", "tcgexp.plan.loader", "tcgexp.plan.planner",
                  "tcgexp.track.aim_run", "tcgexp.track.remote", "tcgexp.train.model", "tcgexp.train.optim",
                  "tcgexp.train.schedule", "tcgexp.train.run", "tcgexp.bench.trace", "tcgexp.sweep.config")


def register_configs() -> None:
    for name in SCHEMA_MODULES:
        importlib.import_module(name)
    register_sweeper()


def register_sweeper() -> None:
    """Hydra finds sweepers by walking the ``hydra_plugins`` namespace, which an editable install made by a
    PEP 660 finder hides from the walk (it maps imports, lists no folders); registering the class, Hydra's
    own API for that, makes ``hydra/sweeper=halving`` work whichever way tcgexp was installed."""
    from hydra.core.plugins import Plugins
    from hydra_plugins.tcgexp_sweepers.halving import HalvingSweeper

    Plugins.instance().register(HalvingSweeper)


# Hydra's ${now:} differs between the ranks of one mlx.launch by however long they took to start:
# ${launch_now:} is rank 0's clock on every rank, so they share one run dir; a plain run is unchanged.
# ${rank_suffix:} keeps each rank's job log its own (train.log, train.rank1.log, ...).
OmegaConf.register_new_resolver("launch_now", lambda pattern: launch_time().strftime(pattern), use_cache=True,
                                replace=True)
OmegaConf.register_new_resolver("rank_suffix", rank_suffix, replace=True)

# hydra.sweeper settings that may change between runs of one study (more trials, another batch size)
STUDY_FREE = ("hydra.sweeper.n_trials", "hydra.sweeper.batch", "hydra.sweeper.max_interruptions")


def sweep_name(date: str, time: str, *, _root_: DictConfig) -> str:
    """``hydra.sweep.dir``'s name under multirun/: ``<date>/<time>`` (Hydra's default), except for a halving
    sweep, whose study lives in its sweep dir: ``halving/<digest of the command>``, so re-running the same
    command (after Ctrl-C, a SIGKILL, or to add trials with more ``hydra.sweeper.n_trials``) continues its
    study rather than starting a new one in a new folder. The digest covers the command's overrides (the
    search space included) and its ``hydra.sweeper.*`` settings but the ones in STUDY_FREE."""
    import hashlib

    from .sweep.config import TARGET

    if OmegaConf.select(_root_, "hydra.sweeper._target_", default=None) != TARGET:
        return f"{date}/{time}"
    task = [str(o) for o in OmegaConf.select(_root_, "hydra.overrides.task", default=[]) or []]
    settings = [str(o) for o in OmegaConf.select(_root_, "hydra.overrides.hydra", default=[]) or []
                if str(o).startswith("hydra.sweeper.") and not str(o).startswith(STUDY_FREE)]
    digest = hashlib.sha256("\n".join(sorted(task) + sorted(settings)).encode()).hexdigest()[:12]
    return f"halving/{digest}"


OmegaConf.register_new_resolver("sweep_name", sweep_name, replace=True)  # (no cache: it reads the root)


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

    register_configs()
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: its search path has conf/ already
        return hydra_compose(config_name=config_name, overrides=list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def _leaves(cfg, prefix: str = ""):
    """(dotted key, value) for every leaf of the composed config, list items too (the hydra node excluded)."""
    for key in (cfg if isinstance(cfg, DictConfig) else range(len(cfg))):
        if key == "hydra":
            continue
        node, name = cfg[key], f"{prefix}{key}"
        if isinstance(node, (DictConfig, ListConfig)):
            yield from _leaves(node, name + ".")
        else:
            yield name, node


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


def _nodes(cfg: DictConfig, prefix: str = ""):
    """(dotted prefix, node) for every config node, the root first (the hydra node excluded)."""
    yield prefix, cfg
    for key in cfg:
        if key != "hydra" and isinstance(cfg._get_node(key), DictConfig) and not OmegaConf.is_missing(cfg, key):
            yield from _nodes(cfg[key], f"{prefix}{key}.")
