"""Typed schemas behind every Hydra config group.

Each group's YAML options (``conf/<group>/<option>.yaml``) start from the
schema stored here (``defaults: [base_<group>, _self_]``), so a misspelt key or
a value of the wrong type fails at composition with Hydra's own message, before
any work starts. ``register_configs()`` runs on import of this module; every
entry point imports it before ``@hydra.main`` composes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


@dataclass
class DatasetConfig:
    """Day-partitioned Parquet corpus, built from seeded simulator replays."""

    _target_: str = "tcgexp.data.corpus.Corpus"
    name: str = MISSING
    root: str = "data/${.name}"  # one folder per dataset option (demo, 1d, 5d coexist); relative to the launch dir
    start_date: str = "2026-07-27"  # first day; days are consecutive dates
    days: int = 1
    rows_per_day: int = 3000
    row_group_rows: int = 2048  # target rows per row group (whole episodes)
    episodes_per_shard: int = 16  # build unit: one ZIP member, one .done marker
    val_fraction: float = 0.1  # share of episodes held out, never split by row
    seed: int = 0
    max_turns: int = 60
    would_ko: bool = True  # counterfactual would-KO labels (about 10 % of build time)
    compression: str = "zstd"
    workers: int = 1  # encoder processes (0 = one per core); >1 pays ~1 s of process start-up
    verify: str = "quick"  # quick: metadata vs manifest; full: also checksum + every row group
    # choosing days (instead of start_date + days): train on exactly these built days, found in the catalog;
    # a day not built, or built with other settings, is refused by name. Either a list ...
    dates: Optional[list[str]] = None  # e.g. dataset.dates=[2026-07-27,2026-08-02]
    # ... or a range of consecutive days (an open end is the catalog's first/last built day)
    date_from: Optional[str] = None
    date_to: Optional[str] = None


@dataclass
class CacheConfig:
    """Row-group cache policy (implemented with the data path)."""

    policy: str = MISSING  # off | fifo | lru | hot60 | plan
    capacity: int = 8  # resident row groups
    hot_fraction: float = 0.6
    promotion_hits: int = 2
    high_watermark_pct: float = 85.0
    spill: bool = True
    spill_budget_bytes: int = 2 * 1024**3
    prefetch_workers: int = 1  # loader threads assembling microbatches ahead in plan order
    # what in_opt_step() suppresses: "pressure" (the seed's concern: a memory spike mid-step) or "all"
    # (capacity eviction too; loader threads' misses during a step are then served uncached)
    opt_step_guard: str = "pressure"


@dataclass
class TbpttConfig:
    enabled: bool = True
    chunk: int = 16  # decisions per chunk: the gradient horizon
    batch_size: int = 256  # physical row budget per microbatch
    accum_steps: int = 1
    lane_order: str = "grouped"  # grouped: few live row groups | naive: global lane shuffle


@dataclass
class SchedulerConfig:
    name: str = MISSING  # cosine | linear | constant
    warmup_steps: int = 0
    total_steps: int = 0  # 0 = this run's real optimizer-step horizon
    min_lr_ratio: float = 0.0
    reset: bool = False  # on resume: false = keep the checkpoint's schedule (exact continuation); true = start a new one


@dataclass
class ModelConfig:
    name: str = MISSING
    hidden: int = 128
    memory: bool = True  # false: same network, stateless (the ablation)


@dataclass
class OptimizerConfig:
    name: str = MISSING
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0


@dataclass
class TrainerConfig:
    epochs: int = 3
    aux_weight: float = 0.25  # weight of the four auxiliary losses beside the policy loss
    max_steps: int = 0  # stop (resumably) after this many optimizer steps; 0 = run all epochs


@dataclass
class CheckpointConfig:
    every_epochs: int = 1
    latest_every_steps: int = 50


@dataclass
class TrackingConfig:
    """A tracker factory: ``build(cfg.tracking)(hparams=..., context=..., resume_hash=...)``."""

    _target_: str = MISSING
    _partial_: bool = True
    experiment: Optional[str] = None  # default: named after the sweep (or the single run)


@dataclass
class AimTrackingConfig(TrackingConfig):
    repo: Optional[str] = "."  # the folder holding .aim/


@dataclass
class AimRemoteTrackingConfig(TrackingConfig):
    uri: str = "aim://127.0.0.1:53800"  # a running `aim server`


@dataclass
class OffTrackingConfig(TrackingConfig):
    pass


@dataclass
class Config:
    dataset: DatasetConfig = MISSING
    cache: CacheConfig = MISSING
    tbptt: TbpttConfig = MISSING
    scheduler: SchedulerConfig = MISSING
    model: ModelConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    trainer: TrainerConfig = MISSING
    checkpoint: CheckpointConfig = MISSING
    tracking: TrackingConfig = MISSING
    seed: int = 0
    resume: Optional[str] = None  # a run dir or checkpoint dir to continue


class DataAction(Enum):
    build = "build"  # build missing days, validate finished ones
    clean = "clean"  # drop derived files (refused for a day whose replay ZIP is missing)


@dataclass
class DataAppConfig:
    """``python -m tcgexp.data``: build/validate, or clean derived files of, the configured days."""

    dataset: DatasetConfig = MISSING
    action: DataAction = DataAction.build


GROUPS: dict[str, type] = {
    "dataset": DatasetConfig,
    "cache": CacheConfig,
    "tbptt": TbpttConfig,
    "scheduler": SchedulerConfig,
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "trainer": TrainerConfig,
    "checkpoint": CheckpointConfig,
    "tracking": TrackingConfig,
}


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(name="base_data_app", node=DataAppConfig)
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)
    for name, schema in (("base_aim", AimTrackingConfig), ("base_aim_remote", AimRemoteTrackingConfig),
                         ("base_off", OffTrackingConfig)):
        cs.store(group="tracking", name=name, node=schema)


register_configs()


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


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with overrides, outside any ``@hydra.main``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


@dataclass
class ReplayConfig:
    """``python -m tcgexp.cache.replay``: miss-ratio curves of a configured plan's access trace."""

    dataset: DatasetConfig = MISSING
    tbptt: TbpttConfig = MISSING
    seed: int = 0
    epochs: int = 1  # epochs of the plan to replay back to back
    split: str = "train"  # train | val
    capacities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16])
    policies: list[str] = field(default_factory=lambda: ["fifo", "lru", "hot60", "plan"])
    hot_fraction: float = 0.6
    promotion_hits: int = 2


ConfigStore.instance().store(name="base_replay", node=ReplayConfig)


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
    """Refuse impossible values before any work starts (types were checked at composition)."""
    from .cache.policy import POLICIES
    from .train.schedule import NAMES as SCHEDULES

    for key, value in _leaves(cfg):  # NaN or infinity in any number trains garbage: refuse it by name
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value} is impossible: it must be a finite number")
    rules = [
        ("cache.policy", cfg.cache.policy in POLICIES, f"one of {sorted(POLICIES)}"),
        ("cache.capacity", cfg.cache.capacity >= 0, ">= 0 row groups"),
        ("cache.hot_fraction", 0.0 <= cfg.cache.hot_fraction <= 1.0, "in [0, 1]"),
        ("cache.promotion_hits", cfg.cache.promotion_hits >= 0, ">= 0"),
        ("cache.high_watermark_pct", 0.0 < cfg.cache.high_watermark_pct <= 100.0, "in (0, 100]"),
        ("cache.spill_budget_bytes", cfg.cache.spill_budget_bytes >= 0, ">= 0"),
        ("cache.prefetch_workers", cfg.cache.prefetch_workers >= 0, ">= 0"),
        ("cache.opt_step_guard", cfg.cache.opt_step_guard in ("pressure", "all"), "'pressure' or 'all'"),
        ("tbptt.chunk", cfg.tbptt.chunk >= 1, ">= 1 decisions"),
        ("tbptt.batch_size", cfg.tbptt.batch_size >= 1, ">= 1 rows"),
        ("tbptt.accum_steps", cfg.tbptt.accum_steps >= 1, ">= 1"),
        ("tbptt.lane_order", cfg.tbptt.lane_order in ("grouped", "naive"), "'grouped' or 'naive'"),
        ("scheduler.name", cfg.scheduler.name in SCHEDULES, f"one of {list(SCHEDULES)}"),
        ("scheduler.warmup_steps", cfg.scheduler.warmup_steps >= 0, ">= 0"),
        ("scheduler.total_steps", cfg.scheduler.total_steps >= 0, ">= 0 (0 = this run's horizon)"),
        ("model.hidden", cfg.model.hidden >= 1, ">= 1"),
        ("optimizer.lr", cfg.optimizer.lr > 0, "> 0"),
        ("optimizer.weight_decay", cfg.optimizer.weight_decay >= 0, ">= 0"),
        ("optimizer.grad_clip", cfg.optimizer.grad_clip >= 0, ">= 0 (0 = no clipping)"),
        ("trainer.aux_weight", cfg.trainer.aux_weight >= 0, ">= 0"),
        ("scheduler.min_lr_ratio", 0.0 <= cfg.scheduler.min_lr_ratio <= 1.0, "in [0, 1]"),
        ("trainer.epochs", cfg.trainer.epochs >= 1, ">= 1"),
        ("trainer.max_steps", cfg.trainer.max_steps >= 0, ">= 0 (0 = no limit)"),
        ("checkpoint.every_epochs", cfg.checkpoint.every_epochs >= 1, ">= 1"),
        ("checkpoint.latest_every_steps", cfg.checkpoint.latest_every_steps >= 0, ">= 0 (0 = only at epoch ends)"),
    ]
    for key, ok, want in rules:
        if not ok:
            raise ConfigError(f"{key}={OmegaConf.select(cfg, key)!r} is impossible: it must be {want}")
