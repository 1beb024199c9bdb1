"""The halving sweeper's settings (``hydra.sweeper.*``): the typed schema behind ``hydra/sweeper=halving``.

Registered in Hydra's ConfigStore as ``hydra/sweeper/base_halving`` (``tcgexp.config``), so a misspelt
key or a wrong type fails at composition; ``CHECKS`` are applied before any trial runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict, Optional

TARGET = "hydra_plugins.tcgexp_sweepers.halving.HalvingSweeper"
SAMPLERS = ("tpe", "random", "grid", "cmaes")


@dataclass
class HalvingSweeperConfig:
    _target_: str = TARGET
    n_trials: int = 20  # configurations to try (a grid stops at its size)
    min_epochs: int = 1  # the lowest rung's budget (rungs: max_epochs / eta^k, rounded, not below this)
    max_epochs: int = 9  # the full budget: every trial's schedule spans it; the best trials train to it
    eta: int = 3  # keep the best 1/eta of each rung; rungs are eta times apart
    seeds: int = 1  # replicates of each configuration (seed, seed+1, ...); promotion and ranking on the mean
    sampler: str = "tpe"  # tpe | random | grid | cmaes (numeric spaces)
    sampler_seed: Optional[int] = None  # the sampler's own seed (not the runs'); fixed: a repeatable search
    direction: Optional[str] = None  # minimize | maximize; None: from optimized_metric (accuracy: maximize)
    storage: Optional[str] = None  # None: sqlite:///<sweep dir>/optuna.db; an SQLAlchemy URL or a journal file
    study_name: Optional[str] = None  # None: the sweep dir as given (hydra.sweep.dir)
    batch: Optional[int] = None  # jobs handed to the launcher at once; None: its parallelism (joblib n_jobs, ...)
    max_interruptions: int = 2  # a job stopped by a signal (preemption) is continued this often, then failed
    params: Optional[Dict[str, str]] = None  # the search space, in the sweep grammar (the command line adds)
    CHECKS: ClassVar[tuple] = (
        ("n_trials", lambda v: v >= 1, ">= 1"),
        ("min_epochs", lambda v: v >= 1, ">= 1"),
        ("max_epochs", lambda v: 1 <= v <= 10**6, "in [1, 1e6]"),
        ("eta", lambda v: v >= 2, ">= 2 (each rung keeps the best 1/eta)"),
        ("seeds", lambda v: v >= 1, ">= 1"),
        ("sampler", lambda v: v in SAMPLERS, f"one of {', '.join(SAMPLERS)}"),
        ("direction", lambda v: v in (None, "minimize", "maximize"), "minimize or maximize (or null: from optimized_metric)"),
        ("batch", lambda v: v is None or v >= 1, ">= 1 (or null: the launcher's parallelism)"),
        ("max_interruptions", lambda v: v >= 0, ">= 0"),
    )
    NULLABLE: ClassVar[tuple] = ("direction", "batch")
