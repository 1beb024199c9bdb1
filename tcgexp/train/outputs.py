"""What a run leaves behind: its checkpoints (``Checkpointer``), result.json and the end-of-run report.

``Checkpointer`` is built from the ``checkpoint`` group (the trainer supplies
the folder): when latest/, epoch_NNNN/ and best/ are written, and where.
``finish`` writes result.json and prints both caches' tallies and diagnosis.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from rich.console import Console

from ..cache.report import with_rates
from ..learn.diverge import strict
from ..lifecycle import checkpoint as ckpt
from ..lifecycle.ckpt_writer import CheckpointWriter
from ..lifecycle.distributed import World
from ..lifecycle.result_file import write_result
from ..ownership import tree_bytes
from .parts import DataParts, Learner


class Checkpointer:
    """latest/ (rolling, enough to resume exactly), epoch_NNNN/ and best/ under `folder`, each written whole
    (``checkpoint.save``): latest/ every ``latest_every_steps`` optimizer steps, at every stop and every
    epoch end; epoch_NNNN/ every ``every_epochs`` epochs and after the last; best/ on a better validation loss.

    Each save is taken at its step (``checkpoint.snapshot``, its weights checked finite there) and written
    by a thread of its own while training goes on (``ckpt_writer``): a failed write is raised at the next
    step boundary (``check``), and ``drain`` waits for every write (each epoch's end, every stop)."""

    PER_SAVE = 3  # the most checkpoints one save writes (latest/, epoch_NNNN/, best/), each whole beside the old

    def __init__(self, *, every_epochs: int, latest_every_steps: int, folder: Path) -> None:
        self.every_epochs, self.latest_every_steps, self.folder = every_epochs, latest_every_steps, Path(folder)
        self.writer = CheckpointWriter()
        self.estimate_bytes = 0  # one checkpoint's size before the first is written (the run's estimate)
        self.last_bytes = 0  # the last checkpoint's size, as written

    def reserve_for(self, spill_dir: Path) -> int:
        """What a spill in `spill_dir` must leave free for the next save: ``PER_SAVE`` checkpoints of the last one's
        size (or the estimate), when the spill shares the checkpoints' filesystem; else 0."""
        here = self.nearest()
        try:
            same = here is not None and os.stat(spill_dir).st_dev == os.stat(here).st_dev
        except OSError:
            return 0
        return self.PER_SAVE * (self.last_bytes or self.estimate_bytes) if same else 0

    def nearest(self) -> Path | None:
        """The checkpoints' folder, or the nearest folder above it that exists (before the first save)."""
        return next((p for p in (self.folder, *self.folder.parents) if p.exists()), None)

    def short_of_space(self) -> bool:
        """Whether the checkpoints' disk has less room than one checkpoint (MLX says a full disk only as
        'Unable to write')."""
        try:
            st = os.statvfs(self.nearest() or self.folder)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < (self.last_bytes or self.estimate_bytes)

    def latest_due(self, opt_steps: int) -> bool:
        return bool(self.latest_every_steps) and opt_steps % self.latest_every_steps == 0

    def names(self, kind: str, epochs_done: int, epochs: int) -> list[str]:
        """The checkpoints a save of `kind` ("latest" | "epoch" | "epoch+best") writes, latest/ always."""
        names = ["latest"]
        if kind.startswith("epoch") and (epochs_done % self.every_epochs == 0 or epochs_done == epochs):
            names.append(f"epoch_{epochs_done:04d}")
        if kind.endswith("best"):
            names.append("best")
        return names

    def write(
        self,
        names: list[str],
        *,
        model,
        optimizer,
        lanes: dict,
        state: dict,
        abandon=None,
        make_room=None,
        written=None,
    ) -> None:
        """Take the checkpoint now and queue its folders' writes, in order (`abandon`: ``CheckpointWriter``).
        On the writer's thread: a folder whose write failed is written again once if `make_room(exc)` freed
        space (the spill's, on a full disk); `written()` is called once every folder is written."""
        snap = ckpt.snapshot(model=model, optimizer=optimizer, lanes=lanes, state=state)
        ckpt.check_finite(snap.params, self.folder / names[0])  # refused here, at its step, as before
        paths = [self.folder / name for name in names]

        def job() -> None:
            for path in paths:
                try:
                    ckpt.write(path, snap)
                except ckpt.CheckpointWriteError as exc:
                    if make_room is None or not make_room(exc):
                        raise
                    ckpt.write(path, snap)
                self.last_bytes = tree_bytes(path)  # read by the spill's reserve and after a failed write
            if written is not None:
                written()

        self.writer.submit(job, abandon)

    def check(self) -> None:
        """Raise a failed write's error (at a step boundary)."""
        self.writer.check()

    def drain(self, abandon=None) -> None:
        """Wait for every queued write, then raise a failed one's error."""
        self.writer.drain(abandon)


def rank_counters(world: World, cache, name: str) -> list[dict]:
    """Every rank's counters of its `name` cache (one small all-reduce with several ranks)."""
    mine = cache.counters()
    keys = list(mine)
    rows = world.gather_rows(np.array([float(mine[k]) for k in keys]), f"the {name} cache counters")
    return [{k: type(mine[k])(v) for k, v in zip(keys, row.tolist())} for row in rows]  # counts stay ints


def sum_counters(per_rank: list[dict]) -> dict:
    """The run's counters: counts summed over ranks, rates recomputed from the sums, memory the highest."""
    if len(per_rank) == 1:  # one rank's counters are the run's
        return per_rank[0]
    out = {k: sum(c[k] for c in per_rank) for k in per_rank[0]}
    out["memory_pct"] = max(c["memory_pct"] for c in per_rank)
    return with_rates(out)


def result_of(
    *,
    status: str,
    error: str | None,
    signal: str | None,
    run_dir: Path,
    data: DataParts,
    learner: Learner,
    per_rank: dict,
    world: World,
    timings: dict,
    blas: str,
    aim_hash,
) -> dict:
    """result.json's content (strict JSON: what is unknown is null).

    status: "completed", "stopped" (trainer.max_steps: resumable), "interrupted" (by `signal`, e.g.
    "SIGTERM": resumable), "diverged" (with `error`) or "failed" (a rank lost). `timings`: step,
    data stall and all-reduce seconds, the wall time and the loop's time split per epoch.
    """
    p = learner.progress
    rows = p.rows - learner.start_rows  # this segment's (a resumed run started at the checkpoint's count)
    busy = max(timings["step_seconds"] + timings["data_stall_seconds"], 1e-9)
    return strict(
        {
            "status": status,
            "error": error,
            "signal": signal,
            "run_dir": str(run_dir),
            "stopped_early": status in ("stopped", "interrupted"),
            "resumed_from": str(learner.resumed_from or ""),
            # init_from: the checkpoint this model started from, and every one before it (the first run first)
            "init_from": learner.lineage[-1] if learner.lineage else None,
            "lineage": list(learner.lineage),
            "dates": list(data.corpus.dates),
            "final": p.history[-1]["val"] if p.history else None,
            "best": {"val_loss": p.best_val_loss, "epoch": p.best_epoch},
            "history": p.history,
            # microbatches: with rows, over all ranks; positions: what each rank stepped through (padding included)
            "planned": {
                "microbatches": sum(data.planned_real),
                "optimizer_steps": sum(data.planned_steps),
                "per_epoch_microbatches": data.planned_real,
                "positions": sum(data.planned_microbatches),
            },
            "processed": {
                "microbatches": p.real,
                "optimizer_steps": p.opt_steps,
                "rows": p.rows,
                "positions": p.microbatches,
            },
            "cache": {k: sum_counters(v) for k, v in per_rank.items()},
            # every byte fetched from an object store by this process (caches, lane index, footers, manifests, the
            # precision check), over all ranks; the caches' own remote_bytes are their share of it
            "remote_bytes": int(
                world.gather_rows(
                    np.array([data.corpus.remote_bytes], np.int64), "the bytes fetched from the store"
                ).sum()
            ),
            "world_size": world.size,
            "shards": data.planner.shards,
            # this segment's (a resumed run's own process): its rows over its time; the counts above are the run's
            "segment": {
                "rows": rows,
                "optimizer_steps": p.opt_steps - learner.start_opt_steps,
                "wall_seconds": timings["wall_seconds"],
            },
            "wall_seconds": timings["wall_seconds"],
            "rows_per_second": rows / busy,
            "data_stall_seconds": timings["data_stall_seconds"],
            "data_stall_share": timings["data_stall_seconds"] / busy,
            # rank 0's: compute = step - allreduce
            "step_seconds": timings["step_seconds"],
            "allreduce_seconds": timings["allreduce_seconds"],
            # this process's epochs: where each one's wall time went (step, data wait, hooks, checkpoints, validation)
            "time_split": timings.get("time_split", []),
            "blas": blas,
            "aim_hash": aim_hash,
            "cache_per_rank": per_rank,
        }
    )


def report(result: dict, run_dir: Path, caches: tuple, console: Console, world: World) -> None:
    """Rank 0 writes result.json and prints both caches' tallies and diagnosis, then the final line."""
    if not world.lead and result["status"] != "failed":  # one result.json, one report: rank 0's
        return
    write_result(run_dir, result, replace=world.lead)  # a failed run's survivors: unless rank 0 wrote one
    if not world.lead:
        return
    for cache in caches:
        console.print(cache.tally() + (" (rank 0's)" if world.size > 1 else ""))
    for line in caches[0].diagnose() + caches[1].diagnose():
        console.print(f"[cache] {line}")
    if result["final"] and result["status"] != "diverged":
        f, best = result["final"], result["best"]
        stop = ""  # the option head's stop head, where it had rows to be judged on
        if f.get("stop") is not None:
            stop = f", stop {f['stop']:.4f}, stop accuracy {f['stop_accuracy']:.3f}"
        console.print(
            f"[train] val loss {f['loss']:.4f} (policy {f['policy']:.4f}, accuracy {f['accuracy']:.3f}{stop}); "
            f"best {best['val_loss']:.4f} at epoch {best['epoch']}; {result['rows_per_second']:,.0f} "
            f"rows/s, data stall {100 * result['data_stall_share']:.1f}%; {run_dir}"
        )
