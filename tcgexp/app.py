"""The entry layer: what a tcgexp command does before Hydra composes, and composing outside a command.

Before Hydra composes, a command registers (``register``):

- every schema: importing the modules that declare them with ``@schema`` is registering them, Hydra's
  own ConfigStore pattern (the imports below; a module outside tcgexp registers the same way when
  Hydra's search path names it, ``structured://my_module``); a tool with a root config of its own
  (``tcgexp-replay``: ``tcgexp.bench.trace``) registers it by being imported by the command that runs
  (``tcgexp/cli/replay.py``);
- the resolvers conf/ uses: ``${launch_now:}`` and ``${rank_suffix:}`` (``launch.py``: one clock for
  the ranks of one launch, one job log each), ``${sweep_name:}`` (``sweep/config.py``: a halving sweep's
  folder) and ``${tcgexp.groups:}`` (the ``--help`` text of ``conf/hydra/help/``);
- the halving and interleaved sweepers: Hydra finds sweepers by walking the ``hydra_plugins`` namespace, which an
  editable install made by a PEP 660 finder hides from the walk; registering the class, Hydra's own
  API for that, makes ``hydra/sweeper=halving`` (and ``interleaved``) work however tcgexp was installed.

Hydra's launchers carry the ConfigStore and the resolvers to their job processes (its Singleton
state), so only the command's own process registers. ``hydra_main`` is ``@hydra.main`` for a tcgexp
command (registered first, a user's error in one line); ``compose`` and ``option`` compose outside any
command (tests, benchmarks, a plug-in's tests through ``tcgexp.api``).

Nothing below this layer imports it: the benchmark tools and ``tcgexp.api`` stand above it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

# the modules declaring tcgexp's schemas (each group's, each option's with knobs of its own, the apps' roots),
# imported for that registration alone; none of them imports MLX (compose sets up MKL first: learn/blas.py)
import tcgexp.cache.rowgroup
import tcgexp.data.corpus
import tcgexp.plan.loader
import tcgexp.plan.planner
import tcgexp.sequence.configs  # (the sequence app's root, base_sequence: the train app's and sequence.*)
import tcgexp.track.aim_run
import tcgexp.track.remote
import tcgexp.train.configs  # noqa: F401  (the train app's root, base_config; trainer, checkpoint, model, ...)
from hydra_plugins.tcgexp_sweepers.halving import HalvingSweeper
from hydra_plugins.tcgexp_sweepers.interleaved import InterleavedSweeper

from .config import CONF_DIR, group_options, primary_defaults
from .console import one_line_errors
from .launch import launch_time, rank_suffix
from .learn.blas import setup
from .sweep.config import sweep_name

CONFIG_PATH = str(CONF_DIR)  # absolute, so console scripts and `python -m` find the same folder


def groups_help(config_name: str, *extra: str) -> str:
    """``group: option, option  (default: x)`` for each group of a primary config, then the ``extra`` groups
    and any group that only Hydra's search path has (added with ``+group=option``).

    Inside a Hydra command (``--help``) the options are those of the composed search path: conf/ and
    whatever ``hydra.searchpath`` adds from outside the repository; elsewhere conf/'s YAMLs.
    """
    options = _search_path_options(config_name)
    defaults = primary_defaults(config_name)
    more = [g for g in options("") if g not in (*defaults, *extra, "hydra") and not (CONF_DIR / g).is_dir()]
    lines = [f"{g}: {', '.join(options(g))}  (default: {d})" for g, d in defaults.items()]
    lines += [f"+{g}: {', '.join(options(g))}  (none by default)" for g in (*extra, *more)]
    return "\n".join(lines)


def _search_path_options(config_name: str) -> Callable[[str], list[str]]:
    """group -> its options on the running command's search path (group "": the top-level groups)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.object_type import ObjectType

    if not (GlobalHydra.instance().is_initialized() and HydraConfig.initialized()):
        return lambda group: group_options(group) if group else []
    loader = GlobalHydra.instance().config_loader()
    # the composed hydra.searchpath (the command line's or the primary config's), as an override Hydra re-reads
    paths = list(HydraConfig.get().searchpath or [])
    quoted = ",".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths)
    overrides = [f"hydra.searchpath=[{quoted}]"] if paths else []
    return lambda group: sorted(
        loader.get_group_options(
            group,
            results_filter=ObjectType.GROUP if not group else ObjectType.CONFIG,
            config_name=config_name,
            overrides=overrides,
        )
    )


def register() -> None:
    """Resolvers and the sweeper (the schemas registered when this module was imported); idempotent."""
    from hydra.core.plugins import Plugins

    # ${now:} differs between the ranks of one mlx.launch by however long they took to start:
    # ${launch_now:} is rank 0's clock on every rank, so they share one run dir; a plain run is unchanged.
    OmegaConf.register_new_resolver(
        "launch_now", lambda pattern: launch_time().strftime(pattern), use_cache=True, replace=True
    )
    OmegaConf.register_new_resolver("rank_suffix", rank_suffix, replace=True)  # train.log, train.rank1.log, ...
    OmegaConf.register_new_resolver("sweep_name", sweep_name, replace=True)  # (no cache: it reads the root)
    OmegaConf.register_new_resolver("tcgexp.groups", groups_help, replace=True)
    Plugins.instance().register(HalvingSweeper)
    Plugins.instance().register(InterleavedSweeper)  # hydra/sweeper=interleaved: the grid, seed-major


def hydra_main(config_name: str, *user_errors: type) -> Callable[[Callable[[DictConfig], Any]], Callable[..., Any]]:
    """``@hydra.main`` on conf/<config_name>.yaml for a tcgexp command: registered before Hydra composes (or
    completes, or prints ``--help``), a user's error (``ConfigError``, Hydra's, OmegaConf's, `user_errors`)
    one line (``console.one_line_errors``)."""
    import hydra

    def decorate(task: Callable[[DictConfig], Any]) -> Callable[..., Any]:
        app = hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name=config_name)(task)

        @one_line_errors(*user_errors)
        @functools.wraps(task)
        def main(*args: Any, **kwargs: Any) -> Any:
            setup()  # MKL before MLX, which an option's module (imported while Hydra composes) may load
            register()
            return app(*args, **kwargs)

        return main

    return decorate


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with overrides, outside any ``@hydra.main`` (inside one, with its
    search path)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    setup()  # before Hydra imports the search path's packages: an option's module may import MLX
    register()
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: its search path has conf/ already
        return hydra_compose(config_name=config_name, overrides=list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def option(group: str, name: str, *overrides: str) -> DictConfig:
    """One option of a config group as the train config composes it, e.g. ``option("cache", "lru", "cache.capacity=4")``."""
    return compose(f"{group}={name}", *overrides)[group]
