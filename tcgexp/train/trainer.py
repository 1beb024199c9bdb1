"""The trainer: fits a learner on the data side for the configured epochs, with its checkpoints and tracking.

Built from the ``trainer`` group (partial): ``run.py``, the composition root,
completes it with the parts it built (its checkpointer, its tracker, the run's
context) and hands ``fit`` the data side, the learner and the caches and
loaders; the trainer only fits: it makes the step from its knobs, runs the loop
(``loop.py``) and returns the run's result. It is also what the loop reports to
(``loop.Hooks``): each optimizer step and validation goes to the tracker and
the display, a stop to ``latest/``.
"""

from __future__ import annotations

import io
import time
from dataclasses import replace

import mlx.core as mx
import numpy as np
from omegaconf import DictConfig
from rich.console import Console

from ..console import user_error
from ..learn.diverge import DivergenceError
from ..learn.step import Stepper, to_mx
from ..lifecycle import checkpoint as ckpt
from ..lifecycle.errors import DistributedError
from ..lifecycle.init_from import network
from ..lifecycle.provenance import provenance
from ..lifecycle.signals import WRITE_IN_FLIGHT, Preempted, WaitAbandoned
from ..plan.loader import DirectSource, assemble
from ..track import Tracker
from .display import RunDisplay
from .errors import USER_ERRORS
from .loop import Loop
from .outputs import Checkpointer, rank_counters, report, result_of, sum_counters
from .parts import DataParts, Learner, RunContext
from .tracked_steps import TrackedSteps


class StopRun(Exception):
    """trainer.max_steps or trainer.stop_at_epoch reached: latest/ is written, the run ends and can be resumed."""


class Trainer:
    def __init__(
        self,
        *,
        epochs: int,
        aux_weight: float,
        grad_clip: float,
        max_steps: int,
        stop_at_epoch: int,
        track_every: int,
        kernels: str,
        checkpoints: Checkpointer,
        tracker: Tracker,
        run: RunContext,
    ) -> None:
        self.epochs, self.aux_weight, self.grad_clip, self.max_steps = epochs, aux_weight, grad_clip, max_steps
        self.stop_at_epoch, self.track_every, self.kernels = stop_at_epoch, track_every, kernels
        self.checkpoints, self.tracker = checkpoints, tracker
        self.run, self.world = run, run.world
        self._provenance: dict | None = None

    # -- fit -------------------------------------------------------------------------------
    def fit(self, data: DataParts, learner: Learner, caches: tuple, loaders: tuple) -> dict:
        """Train `learner` on `data` through the (train, val) `caches` and `loaders`: the run's result (rank 0
        also writes it to result.json).

        Raises DivergenceError (after result.json) when the run diverged, DistributedError when a
        rank was lost; a stopping signal, ``max_steps`` or ``stop_at_epoch`` ends it resumably (status in the result).
        """
        self.data, self.learner, self.caches = data, learner, caches
        self.tracked = TrackedSteps(self.tracker, self.world, caches, self.track_every)
        say = self.run.console.print if self.world.lead else None
        if self.kernels != "pure":  # a library is built or loaded: where a run can die without a word
            self.run.note(f"building or loading tcgexp's fused kernels (trainer.kernels={self.kernels})")
        stepper = Stepper(
            learner.model,
            learner.optimizer,
            aux_weight=self.aux_weight,
            grad_clip=self.grad_clip,
            kernels=self.kernels,
            say=say,
        )
        self.step_path = stepper.path  # result.json and every checkpoint record it
        # and every segment's (a run resumed on the other path ran both): consecutive ones on one path merged
        self.segments: list[dict] = []
        for s in [*learner.kernels_before, {"kernels": stepper.path, "from_step": learner.start_opt_steps}]:
            if not self.segments or self.segments[-1]["kernels"] != s["kernels"]:
                self.segments.append(s)
        if say:
            say(f"[train] {stepper.path_line}")
        check_precision(stepper, learner, data, loaders[0].transform)
        self.display = RunDisplay() if self.world.lead else RunDisplay(Console(file=io.StringIO()))
        loop = Loop(
            planner=data.planner,
            stepper=stepper,
            loaders=loaders,
            caches=caches,
            memory=learner.memory,
            progress=learner.progress,
            epochs=self.epochs,
            hooks=self,
            world=self.world,
            hint=divergence_hint(self.run.cfg, self),
        )
        self.run.note("training")  # from here on every ending writes result.json
        with self.display:
            status, error, raised = run_loop(loop)
        return self.finish(loop, loaders[0], status, error, raised)

    def finish(self, loop: Loop, train_loader, status: str, error: str | None, raised: Exception | None = None) -> dict:
        """result.json and the report; then the tracker's status, and every rank waits for rank 0. A failed
        run raises what stopped it after its record is written (`raised`; a lost rank: DistributedError)."""
        world = self.world
        status, error, raised = self.written(status, error, raised)  # every checkpoint on disk before result.json
        # a broken world (a rank lost) can gather nothing more: each survivor reports what it has
        alone = replace(world, size=1) if status == "failed" else world
        if status != "failed":
            self.tracked.flush()  # a run that stopped mid-epoch: its last step's values too (every rank, a gather)
        per_rank = {name: rank_counters(alone, cache, name) for name, cache in zip(("train", "val"), self.caches)}
        signals = self.run.signals
        result = result_of(
            status=status,
            error=error,
            signal=signals.name if status == "interrupted" and signals else None,
            run_dir=self.run.run_dir,
            data=self.data,
            learner=self.learner,
            per_rank=per_rank,
            world=alone,
            timings={
                "step_seconds": loop.step_seconds,
                "data_stall_seconds": train_loader.stall_seconds,
                "allreduce_seconds": loop.reduce_seconds,
                "wall_seconds": time.perf_counter() - self.run.started,
                "time_split": loop.time_split,
            },
            blas=self.run.blas,
            aim_hash=self.tracked.final_hash(),
        )
        # every path the run took, in order ("fused", or "pure, then fused" for a run resumed on the other)
        result["kernels"] = ", then ".join(s["kernels"] for s in self.segments)
        result["kernels_segments"] = self.segments
        report(result, self.run.run_dir, self.caches, self.run.console, alone)
        if status == "failed":  # a rank is gone, or this one failed: no collective can follow
            raise raised if raised is not None and not isinstance(raised, DistributedError) else DistributedError(error)
        if status != "diverged":
            self.tracker.finish(status)
        # no rank leaves before rank 0 has written everything: mlx.launch SIGTERMs the other ranks
        # as soon as one exits non-zero (143 after a signal, 1 after a divergence)
        world.barrier("the end of the run")
        if signals is not None:
            signals.run_over()
        if status == "diverged":
            raise DivergenceError(error)  # after result.json: the run fails, with its report on disk
        return result

    # -- what the loop reports to (loop.Hooks) -----------------------------------------------
    def on_phase(self, name: str, total: int) -> None:
        self.display.phase(name, total)

    def on_advance(self, n: int, fields: dict) -> None:
        self.display.advance(n, fields)

    def latest_due(self, opt_steps: int) -> bool:
        return self.checkpoints.latest_due(opt_steps)

    def settle_after(self, opt_steps: int) -> bool:
        """Will the run stop after optimizer step `opt_steps` (trainer.max_steps, a pending stopping signal)?"""
        return bool(self.max_steps and opt_steps >= self.max_steps) or self.stop_requested() is not None

    def on_step(self, m: dict) -> None:
        self.checkpoints.check()  # a checkpoint write that failed since the last step: the run fails here
        p = self.learner.progress
        counters = self.tracked.step(m, p.opt_steps, p.epoch + 1)  # the epoch in progress, from 1
        self.display.fields.update(lr=m["lr"], **({"hit": counters["hit_rate_pct"]} if counters else {}))
        self.display.rows(m["rows"])
        if self.max_steps and p.opt_steps >= self.max_steps:
            self.save("latest")
            raise StopRun

    def on_validation(self, m: dict) -> None:
        self.tracked.validation(m, self.learner.progress.opt_steps, m["epoch"])

    def checkpoints_written(self) -> None:
        """Wait for the checkpoints being written (an epoch's end, before its validation): a failed one is raised."""
        self.checkpoints.drain(self.abandon_write)

    def abandon_write(self) -> BaseException | None:
        """While the run waits for a checkpoint write after a stopping signal: past ``STOP_GRACE_S`` of it (or at a
        second signal) it leaves with the latest/ it has, as a wait for data does."""
        signals = self.run.signals
        if signals is None or signals.requested is None or not signals.overdue():
            return None
        return WaitAbandoned(signals.requested, WRITE_IN_FLIGHT)

    def written(self, status: str, error: str | None, raised: Exception | None) -> tuple:
        """(status, error, raised) once every checkpoint is written: a write that failed fails the run, unless it
        failed already (the first failure is the one said)."""
        try:
            self.checkpoints.drain(self.abandon_write)
        except Exception as exc:  # noqa: BLE001 - recorded, then raised again by finish
            if status not in ("failed", "diverged"):
                return "failed", failure_line(exc), exc
        return status, error, raised

    def stop_requested(self) -> str | None:
        return self.run.signals.requested if self.run.signals is not None else None

    def safe_point(self, agreed: str | None) -> None:
        """Where nothing is half-done: after the signal every rank `agreed` on (its own, with one
        rank), write latest/ here and stop (Preempted)."""
        if agreed and self.run.signals is not None:
            self.run.signals.agreed = agreed  # result.json names it
            self.save("latest")
            raise Preempted(agreed)

    def save(self, kind: str) -> None:
        """kind: "latest" | "epoch" | "epoch+best" (latest/ is always rewritten).

        Every rank calls this at the same point: the weights are checked equal across ranks, the
        live lanes' memories and the cache counters gathered, and rank 0 writes.
        """
        lr, p, world = self.learner, self.learner.progress, self.world
        world.check_same_weights(lr.model, f"the checkpoint after optimizer step {p.opt_steps} (epoch {p.human_epoch})")
        counters = {name: rank_counters(world, cache, name) for name, cache in zip(("train", "val"), self.caches)}
        live = self.live_lanes()
        if world.lead:
            self.write(kind, live, counters)
        if kind.startswith("epoch") and self.stop_at_epoch and self.stop_at_epoch <= p.epoch < self.epochs:
            raise StopRun  # trainer.stop_at_epoch, on every rank: validated, latest/ written (a halving rung ends)

    def write(self, kind: str, live: ckpt.SparseLanes, counters: dict) -> None:
        """Rank 0 writes the checkpoints a save of `kind` makes."""
        lr, p, world = self.learner, self.learner.progress, self.world
        state = {
            "progress": p.state_dict(),
            "schedule": lr.schedule.state_dict(),
            "aim_hash": self.tracked.hash,
            "blas": self.run.blas,
            "kernels": self.step_path,
            "kernels_segments": self.segments,
            "cache": {k: sum_counters(v) for k, v in counters.items()},
            "cache_per_rank": counters,
            "world": {"size": world.size, "shards": self.data.planner.shards},
            # what the weights are a network of, and where they came from (init_from reads both)
            "network": network(self.run.cfg, self.data.corpus.game, self.data.dims),
            "lineage": lr.lineage,
            "run_dir": str(self.run.run_dir.absolute()),  # a copy of this checkpoint elsewhere still says whose it is
            **self.provenance(),
        }
        if self.run.overrides is not None:  # what a resume= composes again (tcgexp.lifecycle.resume)
            state["overrides"] = list(self.run.overrides)
        self.checkpoints.write(
            self.checkpoints.names(kind, p.epoch, self.epochs),
            model=lr.model,
            optimizer=lr.optimizer,
            lanes={"train": live},
            state=state,
            abandon=self.abandon_write,
            make_room=self.make_room,
            written=self.keep_spill_reserves,
        )

    def make_room(self, exc: Exception) -> bool:
        """A checkpoint's write failed (on the writer's thread): if the disk is full, the spill (a cache) gives
        its space to the checkpoint, once; True when it freed some (the checkpoint is written again)."""
        spills = [c.give_back_spill for c in self.caches if hasattr(c, "give_back_spill")]
        short = getattr(self.checkpoints, "short_of_space", lambda: False)
        full = ckpt.out_of_space(exc) or short()
        freed = sum(give("the disk is full") for give in spills) if full else 0
        if freed:
            self.run.console.print(
                f"[train] the disk filled while a checkpoint was written: the row-group spill gave back "
                f"{freed / 2**20:.1f} MiB and is off for the rest of the run; writing it again",
                markup=False,
                soft_wrap=True,
            )
            return True
        # The write runs beside training: the spill may have made the checkpoint's room itself since the write
        # failed (its reserve evicts on the training thread), so a write MLX could not finish ('Unable to write',
        # its only word for a full disk) is tried once more where the disk now holds a checkpoint.
        return "Unable to write" in str(exc.__cause__ or exc) and not short()

    def keep_spill_reserves(self) -> None:
        """The checkpoints grew (a save written): the spill leaves the next save's room free again."""
        for cache in self.caches:
            getattr(cache, "keep_spill_reserve", lambda: 0)()

    def provenance(self) -> dict:
        """The config, code, packages and data a checkpoint records: the same all run long, made once (``git``
        runs twice to tell the code's version)."""
        if self._provenance is None:
            self._provenance = provenance(self.run.cfg, self.data.manifests)
        return self._provenance

    def live_lanes(self) -> ckpt.SparseLanes:
        """The memories a resume needs: of the lanes in flight on any rank (each rank sends its own,
        one process every shard it runs)."""
        memory, p, planner = self.learner.memory, self.learner.progress, self.data.planner
        live = np.unique(planner.live_lanes(p.epoch, p.position))
        mine = planner.lane_owner(p.epoch)[live] // (planner.shards // self.world.size) == self.world.rank
        rows = self.world.all_sum(
            mx.array(memory.rows(live) * mine[:, None]), "gathering lane memories for a checkpoint"
        )
        return ckpt.SparseLanes((memory.lanes, memory.hidden), live.astype(np.int64), np.array(rows, np.float32))


def run_loop(loop: Loop) -> tuple[str, str | None, Exception | None]:
    """(status, error, what was raised): "completed", "stopped" (trainer.max_steps, stop_at_epoch), "interrupted" (a
    stopping signal), "diverged" (with the guard's line) or "failed" (a rank lost; or anything else that stopped
    it, a checkpoint that cannot be written, a store gone: recorded in result.json, then raised again)."""
    try:
        loop.run()
    except Preempted:
        return "interrupted", None, None
    except StopRun:
        return "stopped", None, None
    except DivergenceError as exc:
        return "diverged", str(exc), None
    except DistributedError as exc:  # a rank died, or the ranks' weights parted: every survivor stops
        return "failed", str(exc), exc
    except Exception as exc:  # noqa: BLE001 - recorded, then raised again by finish
        return "failed", failure_line(exc), exc
    return "completed", None, None


def failure_line(exc: Exception) -> str:
    """result.json's error for what failed a run: a user's error as its one line, anything else with its type."""
    return user_error(exc, USER_ERRORS) or f"{type(exc).__name__}: {exc}"


def divergence_hint(cfg: DictConfig, trainer: Trainer) -> str:
    """The knobs that usually make a run diverge, with this run's values."""
    return (
        f"optimizer.lr={cfg.optimizer.lr}, trainer.aux_weight={trainer.aux_weight}, "
        f"trainer.grad_clip={trainer.grad_clip} (0 = no clipping)"
    )


def check_precision(stepper: Stepper, learner: Learner, data: DataParts, transform) -> None:
    """FP32 check on the batch the run starts with (read directly, so the caches' counters stay clean).

    With shards, a rank's plan can be padding from its position on: then the first microbatch of
    the shards' plans (any rank can build any shard) stands in; every rank checks the same dtypes.
    """
    p, epochs = learner.progress, len(data.planned_steps)
    epoch = min(p.epoch, epochs - 1)
    plan = data.planner.epoch_plan(epoch)
    real = np.flatnonzero(plan.real()[p.position :]) + p.position if p.position < len(plan) else []
    mb = plan[int(real[0])] if len(real) else next(sp[0] for sp in data.planner.shard_plans(epoch) if len(sp))
    first = transform(assemble(mb, DirectSource(data.corpus.files, data.columns), data.columns))
    inputs = to_mx(first.inputs)
    stepper.check_precision(inputs, to_mx(first.targets), learner.memory.read(first, inputs["lane_decisions"].shape[0]))
