"""The halving sweeper's settings (``hydra.sweeper.*``): the typed schema behind ``hydra/sweeper=halving``.

Stored in Hydra's ConfigStore as ``schema.hydra.sweeper.halving`` (``tcgexp.schema``: outside every group,
so neither completion nor ``--help`` offers it as an option); ``conf/hydra/sweeper/halving.yaml`` starts
from it, so a misspelt key or a wrong type fails at composition; ``CHECKS`` are applied before any trial runs.
``sweep_name`` names a halving sweep's folder (the ``${sweep_name:}`` resolver in ``conf/config.yaml``).
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

from omegaconf import DictConfig, OmegaConf

from ..report.multirun import HALVING
from ..schema import INT32_MAX, schema, within

TARGET = HALVING  # the one name of the class (the report reads which sweeper ran by it)
SAMPLERS = ("tpe", "random", "grid", "cmaes")


@schema("hydra.sweeper", "halving")
class HalvingSweeperConfig:
    _target_: str = TARGET
    n_trials: int = 20  # configurations to try (a grid stops at its size)
    min_epochs: int = 1  # the lowest rung's budget (rungs: max_epochs / eta^k, rounded, not below this)
    max_epochs: int = 9  # the full budget: every trial's schedule spans it; the best trials train to it
    eta: int = 3  # keep the best 1/eta of each rung; rungs are eta times apart
    seeds: int = 1  # replicates of each configuration (seed, seed+1, ...); promotion and ranking on the mean
    sampler: str = "tpe"  # tpe | random | grid | cmaes (numeric spaces)
    sampler_seed: int | None = None  # the sampler's own seed (not the runs'); fixed: a repeatable search
    direction: str | None = None  # minimize | maximize; None: from optimized_metric (accuracy: maximize)
    storage: str | None = None  # None: sqlite:///<sweep dir>/optuna.db; an SQLAlchemy URL or a journal file
    study_name: str | None = None  # None: the sweep dir as given (hydra.sweep.dir)
    batch: int | None = None  # jobs handed to the launcher at once; None: its parallelism (joblib n_jobs, ...)
    max_interruptions: int = 2  # a job stopped by a signal (preemption) is continued this often, then failed
    params: dict[str, str] | None = None  # the search space, in the sweep grammar (the command line adds)
    CHECKS: ClassVar[tuple] = (
        ("n_trials", within(1, INT32_MAX), "in [1, 2**31)"),
        ("min_epochs", within(1, 10**6), "in [1, 1e6]"),
        ("max_epochs", within(1, 10**6), "in [1, 1e6]"),
        ("eta", within(2, 10**6), ">= 2 and at most 1e6 (each rung keeps the best 1/eta)"),
        ("seeds", within(1, 10**4), "in [1, 1e4]"),
        ("sampler", lambda v: v in SAMPLERS, f"one of {', '.join(SAMPLERS)}"),
        ("sampler_seed", lambda v: v is None or within(0, 2**32, open_hi=True)(v), "null or in [0, 2**32)"),
        (
            "direction",
            lambda v: v in (None, "minimize", "maximize"),
            "minimize or maximize (or null: from optimized_metric)",
        ),
        ("batch", lambda v: v is None or within(1, 10**6)(v), "in [1, 1e6] (or null: the launcher's parallelism)"),
        ("max_interruptions", within(0, 10**6), "in [0, 1e6]"),
    )
    NULLABLE: ClassVar[tuple] = ("direction", "batch", "sampler_seed")


# hydra.sweeper settings that may change between runs of one study (more trials, another batch size)
STUDY_FREE = ("hydra.sweeper.n_trials", "hydra.sweeper.batch", "hydra.sweeper.max_interruptions")


def sweep_name(date: str, time: str, *, _root_: DictConfig) -> str:
    """``hydra.sweep.dir``'s name under multirun/: ``<date>/<time>`` (Hydra's default), except for a halving
    sweep, whose study lives in its sweep dir: ``halving/<digest of the command>``, so re-running the same
    command (after Ctrl-C, a SIGKILL, or to add trials with more ``hydra.sweeper.n_trials``) continues its
    study rather than starting a new one in a new folder. The digest covers the command's overrides (the
    search space included) and its ``hydra.sweeper.*`` settings but the ones in STUDY_FREE."""
    if OmegaConf.select(_root_, "hydra.sweeper._target_", default=None) != TARGET:
        return f"{date}/{time}"
    task = [str(o) for o in OmegaConf.select(_root_, "hydra.overrides.task", default=[]) or []]
    settings = [
        str(o)
        for o in OmegaConf.select(_root_, "hydra.overrides.hydra", default=[]) or []
        if str(o).startswith("hydra.sweeper.") and not str(o).startswith(STUDY_FREE)
    ]
    digest = hashlib.sha256("\n".join(sorted(task) + sorted(settings)).encode()).hexdigest()[:12]
    return f"halving/{digest}"
