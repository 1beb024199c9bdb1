"""What a run reports to while it trains, and what it leaves behind.

``RunHooks`` is the loop's link to the outside: checkpoints (latest, epoch,
best), Aim metrics, and the progress display. ``finish`` writes result.json
and prints both caches' tallies and diagnosis.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig
from rich.console import Console

from . import checkpoint as ckpt
from .diverge import strict
from .display import RunDisplay
from .provenance import provenance
from .setup import DataParts, Learner
from .signals import Preempted, StopSignals


class StopRun(Exception):
    """trainer.max_steps reached: latest/ is written, the run ends and can be resumed."""


class RunHooks:
    def __init__(self, cfg: DictConfig, run_dir: Path, data: DataParts, learner: Learner, caches: tuple,
                 tracker, display: RunDisplay, blas: str, overrides: Optional[list[str]] = None,
                 signals: Optional[StopSignals] = None) -> None:
        self.cfg, self.data, self.learner, self.tracker, self.display, self.blas = cfg, data, learner, tracker, \
            display, blas
        self.overrides, self.signals = overrides, signals
        self.train_cache, self.val_cache = caches
        self.ckpt_dir = run_dir / "checkpoints"

    def save(self, kind: str) -> None:
        """kind: "latest" | "epoch" | "epoch+best" (latest/ is always rewritten)."""
        lr, p = self.learner, self.learner.progress
        payload = {"progress": p.state_dict(), "schedule": lr.schedule.state_dict(), "aim_hash": self.tracker.hash,
                   "blas": self.blas, "cache": {"train": self.train_cache.counters(), "val": self.val_cache.counters()},
                   **provenance(self.cfg, self.data.manifests)}
        if self.overrides is not None:  # what a resume= composes again (tcgexp.train.resume)
            payload["overrides"] = list(self.overrides)
        live = ckpt.SparseLanes.of(lr.memory.h, self.data.planner.live_lanes(p.epoch, p.position))
        write = lambda name: ckpt.save(self.ckpt_dir / name, model=lr.model, optimizer=lr.optimizer,  # noqa: E731
                                       lanes={"train": live}, state=payload)
        write("latest")
        if kind.startswith("epoch"):
            done = p.epoch  # epochs completed
            if done % int(self.cfg.checkpoint.every_epochs) == 0 or done == int(self.cfg.trainer.epochs):
                write(f"epoch_{done:04d}")
            if kind.endswith("best"):
                write("best")

    def on_step(self, m: dict) -> None:
        p = self.learner.progress
        counters = self.train_cache.counters()
        values = {f"train/{k}": v for k, v in m.items() if k not in ("lr", "grad_norm", "rows")}
        values["lr"], values["train/grad_norm"] = m["lr"], m["grad_norm"]
        values.update({f"cache_train/{k}": v for k, v in counters.items()})
        self.tracker.track(values, step=p.opt_steps, epoch=p.epoch)
        self.display.fields.update(lr=m["lr"], hit=counters["hit_rate_pct"])
        self.display.rows(m["rows"])
        if self.cfg.trainer.max_steps and p.opt_steps >= self.cfg.trainer.max_steps:
            self.save("latest")
            raise StopRun

    def safe_point(self) -> None:
        """After a stopping signal: write latest/ here, where nothing is half-done, and stop (Preempted)."""
        if self.signals is None:
            return
        try:
            self.signals.check()
        except Preempted:
            self.save("latest")
            raise

    def on_validation(self, m: dict) -> None:
        values = {f"val/{k}": v for k, v in m.items() if k != "epoch" and v is not None}
        values.update({f"cache_val/{k}": v for k, v in self.val_cache.counters().items()})
        self.tracker.track(values, step=self.learner.progress.opt_steps, epoch=m["epoch"])


def finish(run_dir: Path, *, data: DataParts, learner: Learner, caches: tuple, step_seconds: float,
           stall_seconds: float, wall: float, status: str, blas: str, aim_hash, console: Console,
           error: Optional[str] = None, signal: Optional[str] = None) -> dict:
    """result.json (strict JSON: what is unknown is null) and the end-of-run report.

    status: "completed", "stopped" (trainer.max_steps: resumable), "interrupted" (by `signal`, e.g.
    "SIGTERM": resumable) or "diverged" (with `error`).
    """
    p = learner.progress
    train_cache, val_cache = caches
    busy = max(step_seconds + stall_seconds, 1e-9)
    result = {
        "status": status, "error": error, "signal": signal,
        "run_dir": str(run_dir), "stopped_early": status in ("stopped", "interrupted"),
        "resumed_from": str(learner.resumed_from or ""),
        "dates": list(data.corpus.dates),
        "final": p.history[-1]["val"] if p.history else None,
        "best": {"val_loss": p.best_val_loss, "epoch": p.best_epoch},
        "history": p.history,
        "planned": {"microbatches": sum(data.planned_microbatches), "optimizer_steps": sum(data.planned_steps),
                    "per_epoch_microbatches": data.planned_microbatches},
        "processed": {"microbatches": p.microbatches, "optimizer_steps": p.opt_steps, "rows": p.rows},
        "cache": {"train": train_cache.counters(), "val": val_cache.counters()},
        "wall_seconds": wall, "rows_per_second": p.rows / busy,
        "data_stall_seconds": stall_seconds, "data_stall_share": stall_seconds / busy,
        "blas": blas, "aim_hash": aim_hash,
    }
    result = strict(result)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=float, allow_nan=False))
    console.print(train_cache.tally())
    console.print(val_cache.tally())
    for line in train_cache.diagnose() + val_cache.diagnose():
        console.print(f"[cache] {line}")
    if result["final"] and status != "diverged":
        f = result["final"]
        console.print(f"[train] val loss {f['loss']:.4f} (policy {f['policy']:.4f}, accuracy {f['accuracy']:.3f}); "
                      f"best {p.best_val_loss:.4f} at epoch {p.best_epoch}; {result['rows_per_second']:,.0f} rows/s, "
                      f"data stall {100 * result['data_stall_share']:.1f}%; {run_dir}")
    return result
