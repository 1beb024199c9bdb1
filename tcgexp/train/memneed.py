"""What a run needs of memory at its peak, against what its job may use: refused before the kernel's OOM killer.

Why: the estimate counted the weights, gradients and two moments (four copies of the parameters) and
one microbatch's activations, and compared them with the machine's free memory. A run of
``model.hidden=16000`` was estimated at 19.5 GiB, allowed against 22.9 GiB, and killed by the kernel
at ~24 GiB after 93 s: the optimizer's update makes the new weights and moments before it lets the
old ones go, the process holds its libraries, the corpus's index and plan, each lane's memory and
the row-group caches, and a job under a cgroup or SLURM has less than the machine. Now ``need``
counts every part at its peak (the factors measured by ``python -m tcgexp.bench memory`` over the
model and batch knobs, with headroom over the worst measured peak) and ``check_memory`` compares it
with the job's room (``tcgexp.memlimit``: its cgroup's limit, SLURM's allocation, the machine's free
memory, the least of them).
"""

from __future__ import annotations

from omegaconf import DictConfig

from ..config import build
from ..errors import ConfigError
from ..games.registry import game, model_dims
from ..memlimit import room as job_room

# Factors measured by `python -m tcgexp.bench memory` (peak resident memory over the model and batch knobs),
# each kept above the worst measured so that the sum bounds every measured peak before HEADROOM:
# copies of the parameters (float32) at the step's peak: weights, gradients, two moments, and the update's
# new weights and moments made before the old ones are released (measured: 4.3 to 5.4 copies, hidden 2048-4096)
PARAM_COPIES = 6.0
ACCUM_COPIES = 2.0  # the accumulated gradients and the sum's temporary (6.6 copies in all measured at hidden=3072)
# the fused step (trainer.kernels auto or fused): its update is one kernel with three outputs per parameter, and
# MLX donates an input's memory to an output only when that output alone holds the input, so the new weights and
# moments sit beside the old ones (measured: 7.2 to 8.0 copies in all, hidden 2048-4096, 2026-12-02)
FUSED_COPIES = 2.0
# the peak of one microbatch's pass over what the model's activation_bytes counts (rows padded to the row
# budget, lane x decision slots), with the loader's decoded microbatches beside it (measured: 0.8 to 1.1)
ACTIVATION_FACTOR = 1.5
LANE_COPIES = 2  # each lane's memory [lanes, hidden]: the table and, while a checkpoint is written, its copy
# MLX's buffer cache (32 MiB on the CPU), thread stacks, pyarrow's pool, the display (measured: ~90 MiB)
RUNTIME = 128 * 2**20
HEADROOM = 1.10  # over the whole: allocator slack, the scheduler's timing of frees


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def dims_of(cfg: DictConfig) -> dict[str, int]:
    """The model's sizes as the run's game gives them (``data.games.model_dims``), from the config alone."""
    dataset = cfg.get("dataset") or {}
    return model_dims(game(str(dataset.get("game", "sim"))), int(dataset.get("max_options", 64)))


def row_bytes(dims: dict[str, int]) -> int:
    """A decoded training row in the row-group cache: features, the action mask and would-KO, the rest; with
    offered options (``option_dim``) each slot's vector too."""
    a = dims["action_dim"]
    return 4 * dims["feature_dim"] + 5 * a + 64 + 4 * a * dims.get("option_dim", 0)


def microbatch_rows(cfg: DictConfig, split_rows: int = 0) -> int:
    """The most rows a microbatch holds: ``tbptt.batch_size``, unless the corpus has fewer (`split_rows`, its
    largest split, after planning; before, what the dataset's own settings build, rows_per_day x days)."""
    budget = int(cfg.tbptt.batch_size)
    if split_rows:
        return min(budget, split_rows)
    try:
        return min(budget, int(cfg.dataset.rows_per_day) * max(int(cfg.dataset.days), 1))
    except (AttributeError, KeyError, TypeError, ValueError):  # a dataset without those knobs
        return budget


def param_copies(cfg: DictConfig) -> float:
    """Copies of the parameters at the step's peak: ``PARAM_COPIES``, more with gradient accumulation and on the
    fused step (``trainer.kernels`` auto may run either: counted as fused, the larger)."""
    fused = str((cfg.get("trainer") or {}).get("kernels", "auto")) != "pure"
    return PARAM_COPIES + (ACCUM_COPIES if int(cfg.tbptt.accum_steps) > 1 else 0.0) + (FUSED_COPIES if fused else 0.0)


def model_bytes(cfg: DictConfig, slots: int = 0, rows: int = 0) -> int:
    """The model's part (float32): parameters at the step's peak (``PARAM_COPIES``) and one microbatch's
    activations, `rows` rows (default ``microbatch_rows``) and `slots` padded (lane x decision) slots.

    The model is built only to be measured: MLX makes weights lazily, so nothing is allocated (the
    run seeds its weights afterwards)."""
    model = build(cfg.model)(**dims_of(cfg))
    return int(
        4 * param_copies(cfg) * model.parameter_count
        + ACTIVATION_FACTOR * model.activation_bytes(rows or microbatch_rows(cfg), slots)
    )


def need(cfg: DictConfig, slots: int = 0, lanes: int = 0, rows: int = 0, held: int | None = None) -> dict[str, int]:
    """Each part of the run's peak, in bytes: what the process holds now (`held`, default this process's resident
    memory: its libraries; after planning the corpus's index and plan too) and its runtime's pools, the model's
    part, each lane's memory (`lanes`,
    known after planning) and the row-group caches (train and validation, at capacity, with the loader's in flight)."""
    import psutil

    cache = cfg.get("cache") or {}
    capacity = int(cache.get("capacity", 0) or 0)
    in_flight = int((cfg.get("loader") or {}).get("workers", 1) or 1) + 1
    group_rows = int(cfg.dataset.get("row_group_rows", 0) or 0)
    if held is None:
        held = psutil.Process().memory_info().rss
    return {
        "held": held + RUNTIME,
        "model": model_bytes(cfg, slots, rows),
        "lanes": LANE_COPIES * 4 * (lanes + 1) * int(cfg.model.hidden) if lanes else 0,
        "caches": 2 * (capacity + in_flight) * group_rows * row_bytes(dims_of(cfg)),
    }


def total(parts: dict[str, int]) -> int:
    return int(HEADROOM * sum(parts.values()))


def check_memory(
    cfg: DictConfig, slots: int = 0, lanes: int = 0, rows: int = 0, room=None, held: int | None = None
) -> None:
    """Refuse a run that cannot fit in its job's memory, naming the knobs and the limit, instead of being
    OOM-killed with no word.

    Before any work (`slots` 0) what every run of this model and row budget needs at least; after
    planning (``planned_slots``, the lanes, `rows`: ``microbatch_rows`` of the corpus's largest split) what the
    plan's largest microbatch needs. `room`: a
    ``memlimit.Room`` (default: this process's, ``memlimit.room()``); `held`: what the process holds now (default:
    its resident memory; a check made for another process, or a test's, passes that process's)."""

    parts = need(cfg, slots, lanes, rows, held)
    want = total(parts)
    have = room if room is not None else job_room()
    if want > have.bytes:
        largest = f", its largest microbatch padded to {slots:,} lane x decision slots" if slots else ""
        shown = ", ".join(f"{k} {gib(v)}" for k, v in parts.items() if v >= 2**26)
        raise ConfigError(
            f"model.hidden={cfg.model.hidden} with tbptt.batch_size={cfg.tbptt.batch_size} "
            f"(tbptt.chunk={cfg.tbptt.chunk}) needs {'about' if slots else 'at least'} {gib(want)} "
            f"at its peak (parameters x {param_copies(cfg):g} for weights, gradients, moments and the "
            f"update's new ones, activations{largest}; {shown}; +{HEADROOM - 1:.0%}), but this job may "
            f"use {gib(have.bytes)} ({have.source}): make model.hidden or tbptt.batch_size smaller, "
            "or give the job more memory"
        )


def row_budget_line(cfg: DictConfig, train_rows: int, steps: int) -> str | None:
    """One line when ``tbptt.batch_size`` is more than the training split holds (every epoch is then one
    microbatch of all of it, however large the budget): said, not silent."""
    budget = int(cfg.tbptt.batch_size)
    if budget <= train_rows:
        return None
    return (
        f"[train] tbptt.batch_size={budget:,} is more rows than the training split holds ({train_rows:,}): each "
        f"microbatch packs what the split has, {steps:,} optimizer step(s) per epoch; a budget below "
        f"{train_rows:,} gives more steps per epoch"
    )
