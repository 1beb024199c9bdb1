"""What a run reports to while it trains, and what it leaves behind.

``RunHooks`` is the loop's link to the outside: checkpoints (latest, epoch,
best), Aim metrics, and the progress display. ``finish`` writes result.json
and prints both caches' tallies and diagnosis.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import mlx.core as mx
import numpy as np
from omegaconf import DictConfig
from rich.console import Console

from ..cache.report import with_rates
from . import checkpoint as ckpt
from .diverge import strict
from .display import RunDisplay
from .distributed import World
from .provenance import provenance
from .setup import DataParts, Learner
from .signals import Preempted, StopSignals


class StopRun(Exception):
    """trainer.max_steps or trainer.stop_at_epoch reached: latest/ is written, the run ends and can be resumed."""


class RunHooks:
    def __init__(self, cfg: DictConfig, run_dir: Path, data: DataParts, learner: Learner, caches: tuple,
                 tracker, display: RunDisplay, blas: str, overrides: Optional[list[str]] = None,
                 signals: Optional[StopSignals] = None, world: Optional[World] = None) -> None:
        self.cfg, self.data, self.learner, self.tracker, self.display, self.blas = cfg, data, learner, tracker, \
            display, blas
        self.overrides, self.signals, self.world = overrides, signals, world or World()
        self.train_cache, self.val_cache = caches
        self.ckpt_dir = run_dir / "checkpoints"

    def save(self, kind: str) -> None:
        """kind: "latest" | "epoch" | "epoch+best" (latest/ is always rewritten).

        With several ranks every rank calls this at the same point: the weights are checked equal
        across ranks, the live lanes' memories and the cache counters gathered, and rank 0 writes.
        """
        lr, p, world = self.learner, self.learner.progress, self.world
        world.check_same_weights(lr.model, f"the checkpoint after optimizer step {p.opt_steps} (epoch {p.epoch})")
        counters = {"train": rank_counters(world, self.train_cache, "train"),
                    "val": rank_counters(world, self.val_cache, "val")}
        live = self.live_lanes()
        if not world.lead:
            return
        payload = {"progress": p.state_dict(), "schedule": lr.schedule.state_dict(), "aim_hash": self.tracker.hash,
                   "blas": self.blas, "cache": {k: sum_counters(v) for k, v in counters.items()},
                   "world": {"size": world.size, "shards": self.data.planner.shards},
                   **provenance(self.cfg, self.data.manifests)}
        if world.size > 1:
            payload["cache_per_rank"] = {k: [dict(c) for c in v] for k, v in counters.items()}
        if self.overrides is not None:  # what a resume= composes again (tcgexp.train.resume)
            payload["overrides"] = list(self.overrides)
        write = lambda name: ckpt.save(self.ckpt_dir / name, model=lr.model, optimizer=lr.optimizer,  # noqa: E731
                                       lanes={"train": live}, state=payload)
        write("latest")
        if kind.startswith("epoch"):
            done = p.epoch  # epochs completed
            if done % int(self.cfg.checkpoint.every_epochs) == 0 or done == int(self.cfg.trainer.epochs):
                write(f"epoch_{done:04d}")
            if kind.endswith("best"):
                write("best")
            stop_at = int(self.cfg.trainer.stop_at_epoch)
            if stop_at and stop_at <= done < int(self.cfg.trainer.epochs):  # validated, latest/ written
                raise StopRun

    def live_lanes(self) -> ckpt.SparseLanes:
        """The memories a resume needs: of the lanes in flight on any rank (each rank sends its own)."""
        lr, p, planner = self.learner, self.learner.progress, self.data.planner
        live = planner.live_lanes(p.epoch, p.position)
        if self.world.size == 1:
            return ckpt.SparseLanes.of(lr.memory.h, live)
        mine = (planner.lane_owner(p.epoch)[live] == self.world.rank)[:, None]
        rows = self.world.all_sum(mx.array(lr.memory.h[live] * mine), "gathering lane memories for a checkpoint")
        return ckpt.SparseLanes(tuple(lr.memory.h.shape), live.astype(np.int64), np.array(rows, np.float32))

    def on_step(self, m: dict) -> None:
        p = self.learner.progress
        per_rank = rank_counters(self.world, self.train_cache, "train")
        counters = sum_counters(per_rank)
        values = {f"train/{k}": v for k, v in m.items() if k not in ("lr", "grad_norm", "rows")}
        values["lr"], values["train/grad_norm"] = m["lr"], m["grad_norm"]
        values.update({f"cache_train/{k}": v for k, v in counters.items()})
        self.tracker.track(values, step=p.opt_steps, epoch=p.epoch)
        self.track_ranks("cache_train", per_rank, p.opt_steps, p.epoch)
        self.display.fields.update(lr=m["lr"], hit=counters["hit_rate_pct"])
        self.display.rows(m["rows"])
        if self.cfg.trainer.max_steps and p.opt_steps >= self.cfg.trainer.max_steps:
            self.save("latest")
            raise StopRun

    def track_ranks(self, prefix: str, per_rank: list[dict], step: int, epoch: int) -> None:
        """Each rank's own counters, with the Aim context {"rank": r} (the sums go untagged)."""
        if self.world.size == 1:
            return
        for r, counters in enumerate(per_rank):
            self.tracker.track({f"{prefix}/{k}": v for k, v in counters.items()}, step=step, epoch=epoch,
                               context={"rank": r})

    def stop_requested(self) -> Optional[str]:
        return self.signals.requested if self.signals is not None else None

    def safe_point(self, agreed: Optional[str] = None) -> None:
        """After a stopping signal: write latest/ here, where nothing is half-done, and stop (Preempted).

        One process decides from its own signal; several ranks from the one they `agreed` on."""
        if self.signals is None:
            return
        try:
            if self.world.size == 1:
                self.signals.check()
            elif agreed:
                self.signals.agreed = agreed  # result.json names it
                raise Preempted(agreed)
        except Preempted:
            self.save("latest")
            raise

    def on_validation(self, m: dict) -> None:
        values = {f"val/{k}": v for k, v in m.items() if k != "epoch" and v is not None}
        per_rank = rank_counters(self.world, self.val_cache, "val")
        values.update({f"cache_val/{k}": v for k, v in sum_counters(per_rank).items()})
        step = self.learner.progress.opt_steps
        self.tracker.track(values, step=step, epoch=m["epoch"])
        self.track_ranks("cache_val", per_rank, step, m["epoch"])


def rank_counters(world: World, cache, name: str) -> list[dict]:
    """Every rank's counters of its `name` cache (one small all-reduce with several ranks)."""
    mine = cache.counters()
    if world.size == 1:
        return [mine]
    keys = list(mine)
    rows = world.gather_rows(np.array([float(mine[k]) for k in keys]), f"the {name} cache counters")
    return [{k: type(mine[k])(v) for k, v in zip(keys, row.tolist())} for row in rows]  # counts stay ints


def sum_counters(per_rank: list[dict]) -> dict:
    """The run's counters: counts summed over ranks, rates recomputed from the sums, memory the highest."""
    if len(per_rank) == 1:
        return per_rank[0]
    out = {k: sum(c[k] for c in per_rank) for k in per_rank[0]}
    out["memory_pct"] = max(c["memory_pct"] for c in per_rank)
    return with_rates(out)


def finish(run_dir: Path, *, data: DataParts, learner: Learner, caches: tuple, step_seconds: float,
           stall_seconds: float, wall: float, status: str, blas: str, aim_hash, console: Console,
           error: Optional[str] = None, signal: Optional[str] = None, world: Optional[World] = None,
           reduce_seconds: float = 0.0) -> dict:
    """result.json (strict JSON: what is unknown is null) and the end-of-run report.

    status: "completed", "stopped" (trainer.max_steps or stop_at_epoch: resumable), "interrupted" (by `signal`, e.g.
    "SIGTERM": resumable) or "diverged" (with `error`). With several ranks every rank calls this
    (the counters are gathered) and rank 0 writes the one result.json.
    """
    p, world = learner.progress, world or World()
    train_cache, val_cache = caches
    per_rank = {"train": rank_counters(world, train_cache, "train"), "val": rank_counters(world, val_cache, "val")}
    busy = max(step_seconds + stall_seconds, 1e-9)
    result = {
        "status": status, "error": error, "signal": signal,
        "run_dir": str(run_dir), "stopped_early": status in ("stopped", "interrupted"),
        "resumed_from": str(learner.resumed_from or ""),
        "dates": list(data.corpus.dates),
        "final": p.history[-1]["val"] if p.history else None,
        "best": {"val_loss": p.best_val_loss, "epoch": p.best_epoch},
        "history": p.history,
        # microbatches: with rows, over all ranks; positions: what each rank stepped through (padding included)
        "planned": {"microbatches": sum(data.planned_real), "optimizer_steps": sum(data.planned_steps),
                    "per_epoch_microbatches": data.planned_real, "positions": sum(data.planned_microbatches)},
        "processed": {"microbatches": p.real, "optimizer_steps": p.opt_steps, "rows": p.rows,
                      "positions": p.microbatches},
        "cache": {k: sum_counters(v) for k, v in per_rank.items()},
        "world_size": world.size, "shards": data.planner.shards,
        "wall_seconds": wall, "rows_per_second": p.rows / busy,
        "data_stall_seconds": stall_seconds, "data_stall_share": stall_seconds / busy,
        "step_seconds": step_seconds, "allreduce_seconds": reduce_seconds,  # rank 0's: compute = step - allreduce
        "blas": blas, "aim_hash": aim_hash,
    }
    if world.size > 1:
        result["cache_per_rank"] = per_rank
    result = strict(result)
    if not world.lead:  # one result.json, one report: rank 0's
        return result
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=float, allow_nan=False))
    console.print(train_cache.tally() + (" (rank 0's)" if world.size > 1 else ""))
    console.print(val_cache.tally() + (" (rank 0's)" if world.size > 1 else ""))
    for line in train_cache.diagnose() + val_cache.diagnose():
        console.print(f"[cache] {line}")
    if result["final"] and status != "diverged":
        f = result["final"]
        console.print(f"[train] val loss {f['loss']:.4f} (policy {f['policy']:.4f}, accuracy {f['accuracy']:.3f}); "
                      f"best {p.best_val_loss:.4f} at epoch {p.best_epoch}; {result['rows_per_second']:,.0f} rows/s, "
                      f"data stall {100 * result['data_stall_share']:.1f}%; {run_dir}")
    return result
