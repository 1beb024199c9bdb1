"""Typed schemas behind every Hydra config group: the one home of each knob's default and check.

Each group's YAML options (``conf/<group>/<option>.yaml``) start from a schema
stored by ``tcgexp.config`` (``defaults: [base_<group or kind>, _self_]``), so
a misspelt key or a value of the wrong type fails at composition with Hydra's
own message. Where options differ there is a base schema and one subclass per
kind of option. ``CHECKS`` beside the fields are what ``validate`` applies
before any work: (field, predicate, what it must be).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Optional

from omegaconf import II, MISSING

COMPRESSIONS = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")  # what pyarrow's ParquetWriter takes


def _iso_date(value) -> bool:
    import datetime as dt

    try:
        dt.date.fromisoformat(str(value))
        return True
    except ValueError:
        return False


@dataclass
class StorageConfig:
    """Where a corpus in an object store (``dataset.root=s3://bucket/prefix``) is read from, and the local tier.

    Ignored for a local ``dataset.root``. Credentials are never config: pyarrow's S3 client reads
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, ~/.aws, instance roles).
    """

    endpoint: Optional[str] = None  # http(s)://host:port of an S3-compatible server; None: AWS_ENDPOINT_URL[_S3], else AWS
    region: Optional[str] = None  # None: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1
    # fetched row-group column chunks kept on local disk across epochs and runs; None: $TCGEXP_STATE_DIR/tier,
    # else $XDG_CACHE_HOME/tcgexp/tier (~/.cache/tcgexp/tier). Shared safely by concurrent jobs.
    tier_dir: Optional[str] = None
    tier_budget_bytes: int = 16 * 1024**3  # the tier's disk; least recently used chunks go first; 0 = no tier
    retries: int = 3  # attempts per request (the AWS standard retry strategy, with backoff); more = slower to fail
    connect_timeout_s: float = 5.0  # per connection attempt: an endpoint that is down fails fast
    request_timeout_s: float = 30.0  # per request: a server that stops answering costs at most this per attempt
    # (endpoint may be None, which CHECKS cannot express: tcgexp.data.store checks its form when it is used)
    CHECKS: ClassVar[tuple] = (
        ("tier_budget_bytes", lambda v: v >= 0, ">= 0 (0 = no local tier)"),
        ("retries", lambda v: 1 <= v <= 20, "in [1, 20] attempts"),
        ("connect_timeout_s", lambda v: 0 < v <= 600, "in (0, 600] seconds"),
        ("request_timeout_s", lambda v: 0 < v <= 3600, "in (0, 3600] seconds"))


@dataclass
class DatasetConfig:
    """Day-partitioned Parquet corpus, built from seeded simulator replays."""

    _target_: str = MISSING  # the option names the class (conf/dataset/*.yaml)
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
    # root=s3://bucket/prefix (or gs://, abfs://): a published corpus, read by range requests through a local tier
    storage: StorageConfig = field(default_factory=StorageConfig)
    CHECKS: ClassVar[tuple] = (
        ("start_date", lambda v: _iso_date(v), "an ISO date, YYYY-MM-DD"),
        ("days", lambda v: 1 <= v <= 36500, "in [1, 36500]"),
        ("rows_per_day", lambda v: 1 <= v <= 10**9, "in [1, 1e9]"),
        ("row_group_rows", lambda v: 1 <= v <= 10**8, "in [1, 1e8]"),
        ("episodes_per_shard", lambda v: 1 <= v <= 10**6, "in [1, 1e6]"),
        ("val_fraction", lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
        ("seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
        ("max_turns", lambda v: 1 <= v <= 10**6, "in [1, 1e6]"),
        ("compression", lambda v: v in COMPRESSIONS, f"one of {', '.join(COMPRESSIONS)}"),
        ("workers", lambda v: 0 <= v <= 1024, "in [0, 1024] (0 = one per core)"),
        ("verify", lambda v: v in ("quick", "full"), "'quick' or 'full'"))



# -- the residency policy and the row-group cache --------------------------------------------
@dataclass
class PolicyConfig:
    """A residency policy (``tcgexp.cache.policy``); built as a factory: the cache supplies capacity."""

    _target_: str = MISSING
    _partial_: bool = True


@dataclass
class Hot60PolicyConfig(PolicyConfig):
    hot_fraction: float = MISSING  # share of capacity pinned in the hot tier (the option sets it)
    promotion_hits: int = MISSING  # hits in transient before promotion to hot
    CHECKS: ClassVar[tuple] = (("hot_fraction", lambda v: 0.0 <= v <= 1.0, "in [0, 1]"),
                               ("promotion_hits", lambda v: v >= 0, ">= 0"))


@dataclass
class CacheConfig:
    """The row-group cache (``tcgexp.cache.RowGroupCache``); the trainer supplies files, columns, spill dir.

    ``policy`` is untyped here, so a policy from outside tcgexp brings its own knobs
    (``defaults: [base_cache, _self_]``); tcgexp's own options type it (``base_flat``, ``base_hot60``).
    """

    _target_: str = MISSING
    _partial_: bool = True
    policy: Any = MISSING
    capacity: int = 8  # resident row groups (RAM); the grouped lane order needs only a few
    high_watermark_pct: float = 85.0  # psutil memory percent above which transient entries are evicted
    spill: bool = True  # evicted entries go to <run dir>/.cache_spill as .npz
    spill_budget_bytes: int = 2 * 1024**3  # spill never grows past this
    # what in_opt_step() suppresses: "pressure" (the seed's concern: a memory spike mid-step) or "all"
    # (capacity eviction too; loader threads' misses during a step are then served uncached)
    opt_step_guard: str = "pressure"
    CHECKS: ClassVar[tuple] = (
        ("capacity", lambda v: v >= 0, ">= 0 row groups"),
        ("high_watermark_pct", lambda v: 0.0 < v <= 100.0, "in (0, 100]"),
        ("spill_budget_bytes", lambda v: v >= 0, ">= 0"),
        ("opt_step_guard", lambda v: v in ("pressure", "all"), "'pressure' or 'all'"))


@dataclass
class FlatCacheConfig(CacheConfig):
    """off, fifo, lru, plan: policies with no knobs of their own."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)


@dataclass
class Hot60CacheConfig(CacheConfig):
    policy: Hot60PolicyConfig = field(default_factory=Hot60PolicyConfig)


# -- the loader, the planner ----------------------------------------------------------------
@dataclass
class LoaderConfig:
    """Threads turning planned microbatches into arrays ahead of the step (``tcgexp.plan.loader.Loader``)."""

    _target_: str = MISSING
    _partial_: bool = True
    workers: int = 1  # threads assembling microbatches ahead in plan order; 0 = in the training thread
    CHECKS: ClassVar[tuple] = (("workers", lambda v: v >= 0, ">= 0"),)


@dataclass
class TbpttConfig:
    """The TBPTT planner (``tcgexp.plan.Planner``); the trainer supplies the lane index."""

    _target_: str = MISSING
    _partial_: bool = True
    enabled: bool = True  # false: plain batches of whole decisions, no memory carried between them
    chunk: int = 16  # decisions per chunk: the gradient horizon
    batch_size: int = 256  # physical row budget per microbatch (a decision is never split)
    accum_steps: int = 1  # microbatches per optimizer update
    lane_order: str = "grouped"  # grouped: few live row groups | naive: global lane shuffle
    seed: int = II("seed")  # the lane shuffle's seed: the run's
    # lane shards: null = one per rank (mlx.launch); N on one process = N ranks' plans interleaved
    shards: Optional[int] = None
    NULLABLE: ClassVar[tuple] = ("shards",)
    CHECKS: ClassVar[tuple] = (
        ("chunk", lambda v: v >= 1, ">= 1 decisions"), ("batch_size", lambda v: v >= 1, ">= 1 rows"),
        ("accum_steps", lambda v: v >= 1, ">= 1"), ("seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
        ("shards", lambda v: v is None or v >= 1, "null (one per rank) or >= 1"),
        ("lane_order", lambda v: v in ("grouped", "naive"), "'grouped' or 'naive'"))


# -- the learner: model, optimizer, schedule --------------------------------------------------
@dataclass
class SchedulerConfig:
    """A learning-rate schedule in optimizer updates (``tcgexp.train.schedule``); the trainer supplies the horizon."""

    _target_: str = MISSING
    _partial_: bool = True
    warmup_steps: int = 0  # clamped to the horizon
    total_steps: int = 0  # 0 = this run's real optimizer-step horizon
    min_lr_ratio: float = 0.0  # the schedule's floor, as a share of optimizer.lr
    reset: bool = False  # on resume: false = keep the checkpoint's schedule (exact continuation); true = start anew
    CHECKS: ClassVar[tuple] = (
        ("warmup_steps", lambda v: v >= 0, ">= 0"), ("total_steps", lambda v: v >= 0, ">= 0 (0 = this run's horizon)"),
        ("min_lr_ratio", lambda v: 0.0 <= v <= 1.0, "in [0, 1]"))


@dataclass
class ModelConfig:
    """The recurrent policy (``tcgexp.train.model``); the trainer supplies the feature and action sizes."""

    _target_: str = MISSING
    _partial_: bool = True
    hidden: int = 128  # memory width; compute grows ~quadratically
    memory: bool = True  # false: same network, stateless (the ablation)
    CHECKS: ClassVar[tuple] = (("hidden", lambda v: v >= 1, ">= 1"),)


@dataclass
class OptimizerConfig:
    """An MLX optimizer (``tcgexp.train.optim``) that owns the schedule the trainer supplies."""

    _target_: str = MISSING
    _partial_: bool = True
    lr: float = 1e-3  # base learning rate; the schedule shapes it
    grad_clip: float = 1.0  # global-norm clip; 0 disables
    CHECKS: ClassVar[tuple] = (("lr", lambda v: v > 0, "> 0"), ("grad_clip", lambda v: v >= 0, ">= 0 (0 = no clipping)"))


@dataclass
class AdamWConfig(OptimizerConfig):
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    CHECKS: ClassVar[tuple] = OptimizerConfig.CHECKS + (("weight_decay", lambda v: v >= 0, ">= 0"),)


@dataclass
class SGDConfig(OptimizerConfig):
    momentum: float = 0.9
    weight_decay: float = 0.0
    nesterov: bool = False
    CHECKS: ClassVar[tuple] = OptimizerConfig.CHECKS + (("weight_decay", lambda v: v >= 0, ">= 0"),
                                                        ("momentum", lambda v: 0.0 <= v < 1.0, "in [0, 1)"))


@dataclass
class TrainerConfig:
    epochs: int = 3  # each epoch = one full plan over the train split; the final epoch is validated and kept
    aux_weight: float = 0.25  # weight of the four auxiliary losses beside the policy loss
    max_steps: int = 0  # stop (resumably) after this many optimizer steps; 0 = run all epochs
    # stop (resumably, validated, latest/ written) once this many epochs are done, while the schedule's
    # horizon stays `epochs`: what a successive-halving rung trains to; 0 = run all epochs
    stop_at_epoch: int = 0
    CHECKS: ClassVar[tuple] = (("epochs", lambda v: 1 <= v <= 10**6, "in [1, 1e6]"), ("aux_weight", lambda v: v >= 0, ">= 0"),
                               ("max_steps", lambda v: v >= 0, ">= 0 (0 = no limit)"),
                               ("stop_at_epoch", lambda v: v >= 0, ">= 0 (0 = at trainer.epochs)"))


@dataclass
class CheckpointConfig:
    every_epochs: int = 1  # epoch_NNNN/ snapshots; the final epoch is always kept
    latest_every_steps: int = 50  # rolling latest/ for exact resume; smaller = less lost work, more I/O
    CHECKS: ClassVar[tuple] = (("every_epochs", lambda v: v >= 1, ">= 1"),
                               ("latest_every_steps", lambda v: v >= 0, ">= 0 (0 = only at epoch ends)"))


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
    CHECKS: ClassVar[tuple] = (("uri", lambda v: str(v).startswith("aim://"), "aim://host:port of a running aim server"),)


@dataclass
class OffTrackingConfig(TrackingConfig):
    pass


@dataclass
class Config:
    dataset: DatasetConfig = MISSING
    cache: CacheConfig = MISSING
    loader: LoaderConfig = MISSING
    tbptt: TbpttConfig = MISSING
    scheduler: SchedulerConfig = MISSING
    model: ModelConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    trainer: TrainerConfig = MISSING
    checkpoint: CheckpointConfig = MISSING
    tracking: TrackingConfig = MISSING
    seed: int = 0
    resume: Optional[str] = None  # a run dir or checkpoint dir to continue
    optimized_metric: Optional[str] = "val/loss"  # what the task returns to a sweeper: val/<metric> | best/val_loss
    # MLX and numpy seed generators take an unsigned 32-bit seed: anything else is a raw TypeError deep inside
    CHECKS: ClassVar[tuple] = (("seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"),)


class DataAction(Enum):
    build = "build"  # build missing days, validate finished ones
    clean = "clean"  # drop derived files (refused for a day whose replay ZIP is missing)
    publish = "publish"  # upload finished days to target=s3://bucket/prefix, each day's manifest last


@dataclass
class DataAppConfig:
    """``python -m tcgexp.data``: build/validate, or clean derived files of, the configured days."""

    dataset: DatasetConfig = MISSING
    action: DataAction = DataAction.build
    target: Optional[str] = None  # action=publish: the object-store URI the local corpus is uploaded to


GROUPS: dict[str, type] = {
    "dataset": DatasetConfig,
    "cache": CacheConfig,
    "loader": LoaderConfig,
    "tbptt": TbpttConfig,
    "scheduler": SchedulerConfig,
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "trainer": TrainerConfig,
    "checkpoint": CheckpointConfig,
    "tracking": TrackingConfig,
}


# per-option schemas where options differ (a base schema, one subclass per kind of option)
OPTION_SCHEMAS = [("cache", "flat", FlatCacheConfig), ("cache", "hot60", Hot60CacheConfig),
                  ("optimizer", "adamw", AdamWConfig), ("optimizer", "sgd", SGDConfig),
                  ("tracking", "aim", AimTrackingConfig), ("tracking", "aim_remote", AimRemoteTrackingConfig),
                  ("tracking", "off", OffTrackingConfig)]


@dataclass
class ReplayConfig:
    """``python -m tcgexp.bench.trace``: miss-ratio curves of a configured plan's access trace."""

    dataset: DatasetConfig = MISSING
    tbptt: TbpttConfig = MISSING
    seed: int = 0
    epochs: int = 1  # epochs of the plan to replay back to back
    CHECKS: ClassVar[tuple] = (("seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"), ("epochs", lambda v: v >= 1, ">= 1"))
    split: str = "train"  # train | val
    capacities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16])
    policies: list[str] = field(default_factory=lambda: ["fifo", "lru", "hot60", "plan"])  # cache options
