"""The training loop: epochs of planned microbatches, optimizer windows, validation.

Reads as a sequence: plan the epoch -> stream its microbatches through the
cache and loader into the optimizer window (gradients with each lane's
carried memory) -> close the window every ``accum_steps`` microbatches (and
at the plan's end): one all-reduce, one update -> validate -> checkpoint.
Planned and processed counts are asserted at the end of every epoch; a
mismatch is an error, never a silently short epoch.

One process is a world of one like any other: the same window, the same
reductions (each the identity there), the same safe points, where every rank
stops for the signal all of them agreed on.
"""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

import mlx.core as mx
import numpy as np

from ..learn import diverge
from ..learn.losses import AUX_NAMES
from ..learn.state import LaneMemory, TrainState
from ..learn.step import Stepper, to_mx
from ..lifecycle.distributed import World
from .window import REAL, ROWS, SUMS, Queued, Update, Window


def val_keys(stepper: Stepper) -> tuple[str, ...]:
    """What one validation sums, in order: each metric, evaluate's sums (the early/late split, the stop head's), the rows."""
    return (*stepper.metrics, *(f"sum_{k}" for k in stepper.sum_keys), "rows")


class Hooks(Protocol):
    """What the loop reports to (the trainer: display, tracking, checkpoints, signals)."""

    def on_phase(self, name: str, total: int) -> None: ...
    def on_advance(self, n: int, fields: dict) -> None: ...
    def on_step(self, metrics: dict) -> None: ...  # after every optimizer update
    def on_validation(self, metrics: dict) -> None: ...
    def latest_due(self, opt_steps: int) -> bool: ...  # whether latest/ is written after this update
    def settle_after(self, opt_steps: int) -> bool: ...  # whether the run stops after this update (max_steps, a signal)
    def save(self, kind: str) -> None: ...  # "latest" | "epoch" | "epoch+best" (taken now, written in the background)
    def checkpoints_written(self) -> None: ...  # waits for the checkpoints being written; a failed write raised
    def stop_requested(self) -> str | None: ...  # this rank's pending stopping signal, if any
    # where the run may stop with nothing half-done (a stopping signal, see signals.py): before each
    # epoch, after an applied optimizer step, after validation; `agreed` is the signal every rank
    # stops for there (None: go on), so all ranks stop at the same point
    def safe_point(self, agreed: str | None) -> None: ...


class Loop:
    def __init__(
        self,
        *,
        planner,
        stepper: Stepper,
        loaders: tuple,
        caches: tuple,
        memory: LaneMemory,
        progress: TrainState,
        epochs: int,
        hooks: Hooks,
        world: World,
        hint: str = "",
    ) -> None:
        self.planner, self.stepper, self.p, self.epochs, self.hooks = planner, stepper, progress, epochs, hooks
        self.world = world
        self.train_loader, self.val_loader = loaders
        self.train_cache, self.val_cache = caches
        self.memory, self.val_memory = memory, LaneMemory(memory.lanes, memory.hidden)
        self.hint = hint or "a learning rate or loss weight too large"
        # one process running several shards in turn keeps one gradient sum per shard
        self.window = Window(
            stepper, world, size=planner.accum_steps, slots=planner.shards // world.size, hint=self.hint
        )
        self.step_seconds = self.hook_seconds = self.save_seconds = 0.0
        self.time_split: list[dict] = []  # per epoch of this process: where its wall time went (seconds)

    @property
    def reduce_seconds(self) -> float:
        return self.window.reduce_seconds

    # -- the run -------------------------------------------------------------------------
    def run(self) -> None:
        p = self.p
        while p.epoch < self.epochs:
            # all ranks decide together whether a signal stops them here
            self.hooks.safe_point(self.world.agree(self.hooks.stop_requested(), f"the start of epoch {p.epoch + 1}"))
            started = time.time()
            train = self.train_epoch()
            v0 = time.perf_counter()
            self.hooks.checkpoints_written()  # the epoch's checkpoints are on disk (a failed one ends it here)
            val = self.validate()
            split = self.time_split[-1]
            split["validation"] = time.perf_counter() - v0
            done = p.epoch + 1  # this epoch, as people count: the first is epoch 1 (and epoch_0001/)
            p.history.append({"epoch": done, "train": train, "val": val})
            improved = p.best_val_loss is None or val["loss"] < p.best_val_loss  # val["loss"] is finite
            if improved:
                p.best_val_loss, p.best_epoch = val["loss"], done
            self.hooks.on_validation({**val, "epoch": done})
            p.epoch, p.position = p.epoch + 1, 0
            self.hooks.on_phase("checkpointing", 1)
            c0 = time.perf_counter()
            try:
                self.hooks.save("epoch+best" if improved else "epoch")
            finally:  # (trainer.stop_at_epoch stops the run from here)
                # the wall clock when the epoch began and ended: a benchmark places start-up and teardown around them
                split.update(epoch_checkpoint=time.perf_counter() - c0, started_at=started, ended_at=time.time())
            self.hooks.on_advance(1, {})

    # -- one epoch of training -----------------------------------------------------------
    def train_epoch(self) -> dict:
        p = self.p
        t_epoch = time.perf_counter()
        plan = self.begin_epoch()
        sums, rows = dict.fromkeys(self.stepper.metrics, 0.0), 0
        stall0, busy0, hooks0, saves0 = (
            self.train_loader.stall_seconds,
            self.step_seconds,
            self.hook_seconds,
            self.save_seconds,
        )
        queued: Queued | None = None  # a fused window dispatched and not yet read back
        # closed here, not whenever the collector finds it: a second signal landing in its finally (which may
        # join the worker) then ends the run with its one line; inside a finalizer Python prints it as ignored
        with contextlib.closing(self.train_loader.iterate(plan, start=p.position)) as batches:
            for prep in batches:
                t0 = time.perf_counter()
                with self.train_cache.in_opt_step():
                    loss = self.window.add(prep, self.memory)
                closed = None
                if self.window.ends_at(prep.index, len(plan)):
                    step = p.opt_steps + 1 + (queued is not None)  # the optimizer step this window makes
                    where = f"epoch {p.epoch + 1}, optimizer step {step} (microbatch {prep.index} of {len(plan)})"
                    closed = self.window.close(self.hooks.stop_requested(), where)
                self.step_seconds += time.perf_counter() - t0
                p.position, p.microbatches, p.epoch_microbatches = (
                    prep.index + 1,
                    p.microbatches + 1,
                    p.epoch_microbatches + 1,
                )
                if queued is not None:  # the window before this one: read while this one computes
                    rows += self.settle(queued, sums, plan, in_flight=True)
                    queued = None
                if isinstance(closed, Queued):
                    queued = closed
                    if self.must_settle(prep, plan):  # a checkpoint or stop follows: nothing may be in flight
                        rows += self.settle(queued, sums, plan)
                        queued = None
                elif closed is not None:
                    rows += self.timed_hooks(lambda: self.applied(closed, sums, more=p.position < len(plan)))  # noqa: B023 - called at once
                self.hooks.on_advance(1, {"loss": loss} if loss is not None else {})
        self.assert_counts(plan)
        stall, busy = self.train_loader.stall_seconds - stall0, self.step_seconds - busy0
        hooks, wall = self.hook_seconds - hooks0, time.perf_counter() - t_epoch
        # where the epoch's wall time went: the step (dispatch and read-back), waiting for data, the hooks
        # (tracking, display; checkpoints apart) and the rest (loader hand-off, the loop's own bookkeeping)
        self.time_split.append(
            {
                "epoch": p.epoch + 1,
                "wall": wall,
                "step": busy,
                "data_wait": stall,
                "hooks": hooks - (self.save_seconds - saves0),
                "checkpoints": self.save_seconds - saves0,
                "other": max(wall - busy - stall - hooks, 0.0),
            }
        )
        return {
            **{k: v / max(rows, 1) for k, v in sums.items()},
            "rows_per_second": rows / max(stall + busy, 1e-9),
            "data_stall_share": stall / max(stall + busy, 1e-9),
        }

    def must_settle(self, prep, plan) -> bool:
        """Will a checkpoint or a stop follow the update this microbatch closed (the plan's last, latest/ due,
        ``trainer.max_steps``, a stopping signal)? Then it is read back before the next is dispatched, so
        whatever is written holds this update's weights and none after them."""
        step = self.p.opt_steps + 1  # every update before it is accounted for
        return prep.index == len(plan) - 1 or self.hooks.latest_due(step) or self.hooks.settle_after(step)

    def settle(self, queued: Queued, sums: dict, plan, *, in_flight: bool = False) -> int:
        """Read a queued update back, check it, and account for it (``applied``); `in_flight`: the next
        microbatch is already dispatched, so no checkpoint or stop may follow here (``must_settle`` saw to that)."""
        t0 = time.perf_counter()
        update, lr = self.window.read(queued, None if in_flight else self.hooks.stop_requested())
        self.step_seconds += time.perf_counter() - t0
        more = not in_flight and self.p.position < len(plan)
        self.hooks.on_advance(0, {"loss": update.values["loss"]})  # the bar moved when it was dispatched
        return self.timed_hooks(lambda: self.applied(update, sums, more=more, lr=lr, in_flight=in_flight))

    def timed_hooks(self, fn):
        h0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.hook_seconds += time.perf_counter() - h0

    def begin_epoch(self):
        """The epoch's plan, its access trace handed to the train cache; lane memory zeroed at its start."""
        p = self.p
        plan = self.planner.epoch_plan(p.epoch)
        trace = plan.trace()
        if p.epoch + 1 < self.epochs:
            # and the next epoch's: a row group this epoch reads for the last time is read again there, so the
            # plan policy spills it rather than drop it, and the next epoch reads it back instead of decoding it
            trace += self.planner.epoch_plan(p.epoch + 1).trace()
        self.train_cache.set_trace(trace)
        if p.position == 0:
            self.memory.reset()  # every lane starts the epoch from zero memory
            p.epoch_microbatches = p.epoch_opt_steps = p.epoch_real = 0
        self.hooks.on_phase(f"train epoch {p.epoch + 1}/{self.epochs}", len(plan))
        self.hooks.on_advance(p.position, {})
        return plan

    def applied(
        self, update: Update, sums: dict, *, more: bool, lr: float | None = None, in_flight: bool = False
    ) -> int:
        """Count an applied update, report it, write latest/ when due (`more`: the epoch goes on), and
        stop here if the ranks agreed on a signal (not `in_flight`: a later update is already queued).
        `lr`: what the update used (read back with a queued one). Returns the rows it trained on."""
        p, total = self.p, update.total
        p.real, p.epoch_real = p.real + int(total[REAL]), p.epoch_real + int(total[REAL])
        p.rows += int(total[ROWS])
        for i, k in enumerate(self.stepper.metrics):
            sums[k] += float(total[SUMS + i])
        if lr is None:
            lr = float(self.stepper.optimizer.learning_rate)  # what the update just used (the optimizer's schedule)
        p.opt_steps, p.epoch_opt_steps = p.opt_steps + 1, p.epoch_opt_steps + 1
        self.hooks.on_step(
            {
                **{k: update.values[k] for k in self.stepper.metrics},
                "lr": lr,
                "grad_norm": update.values["grad_norm"],
                "rows": p.rows,
            }
        )
        if in_flight:
            return int(total[ROWS])
        if more and self.hooks.latest_due(p.opt_steps):
            s0 = time.perf_counter()
            self.hooks.save("latest")  # at a window boundary: nothing half-accumulated to lose
            self.save_seconds += time.perf_counter() - s0
        self.hooks.safe_point(update.agreed)
        return int(total[ROWS])

    def assert_counts(self, plan) -> None:
        p = self.p
        want_steps = plan.optimizer_steps(self.planner.accum_steps)
        want_real = self.planner.real_microbatches(p.epoch)  # every shard's, with no padding
        if p.epoch_microbatches != len(plan) or p.epoch_opt_steps != want_steps or p.epoch_real != want_real:
            raise RuntimeError(
                f"epoch {p.epoch + 1}: planned {want_real} microbatches ({len(plan)} positions) / {want_steps} "
                f"optimizer steps, processed {p.epoch_real} ({p.epoch_microbatches} positions) / {p.epoch_opt_steps} "
                f"over {self.world.size} rank(s)"
            )

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> dict:
        """This rank's share of validation, summed over ranks; the run stops after it if a signal came."""
        plan = self.planner.validation_plan()
        self.val_cache.set_trace(plan.trace())
        self.val_memory.reset()
        self.hooks.on_phase("validation", len(plan))
        metrics = self.stepper.metrics
        keys = val_keys(self.stepper)
        n = len(keys)
        totals = np.zeros(n + self.world.size)  # + every rank's stop signal slot

        def account(values, sums, rows: int) -> None:  # in plan order, as computed: the same sums
            totals[: len(metrics)] += np.array(values, np.float64) * rows
            totals[len(metrics) : n - 1] += np.array(sums, np.float64)
            totals[n - 1] += rows
            self.hooks.on_advance(1, {})

        # each microbatch is dispatched before the one before it is read back (as in training): its lanes'
        # memory stays in MLX, so the stream goes on while this thread reads values and builds the next graph
        pending = None
        # closed here (see train_epoch)
        with contextlib.closing(self.val_loader.iterate(plan)) as batches:
            for prep in batches:
                inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
                h0 = self.val_memory.read(prep, inputs["lane_decisions"].shape[0])
                values, carry, sums = self.stepper.evaluate(inputs, targets, h0)
                self.val_memory.write(prep, carry)
                mx.async_eval(values, sums, self.val_memory.table)
                if pending is not None:
                    account(*pending)
                pending = (values, sums, prep.rows)
        if pending is not None:
            account(*pending)
        if int(totals[n - 1]) != plan.rows:
            raise RuntimeError(f"validation processed {int(totals[n - 1])} rows, its plan covers {plan.rows}")
        # every rank's share: one all-reduce of the sums and of who must stop (validation changes no
        # weights: a signal during it costs only its time)
        totals[n:] = self.world.signal_row(self.hooks.stop_requested())
        totals = self.world.sum(totals, f"validation after epoch {self.p.epoch + 1}")
        want = self.planner.split_rows("val")
        if int(totals[n - 1]) != want:
            raise RuntimeError(
                f"validation processed {int(totals[n - 1])} rows over {self.world.size} rank(s), the split has {want}"
            )
        t = dict(zip(keys, totals.tolist()))
        rows = int(t["rows"])
        self.hooks.on_phase("metric aggregation", 1)
        out = {k: t[k] / max(rows, 1) for k in metrics}
        for part in ("early", "late"):
            total = t[f"sum_{part}_rows"]
            out[f"policy_{part}"] = t[f"sum_policy_{part}"] / total if total else None  # no such rows
            out[f"accuracy_{part}"] = t[f"sum_accuracy_{part}"] / total if total else None
        if "sum_stop_rows" in t:  # the option head: its parts over exactly their rows, and the loss their sum
            # A microbatch's loss normalises its policy and stop parts by its own few such rows, so weighting it
            # by all its rows lets one microbatch with a single stop row swing the epoch's loss: the best epoch
            # (and the checkpoint that plays) would follow that noise. Here each part is a mean over its rows.
            total = t["sum_stop_rows"]
            out["stop"] = t["sum_stop_loss"] / total if total else None
            out["stop_accuracy"] = t["sum_stop_hits"] / total if total else None
            picks = t["sum_early_rows"] + t["sum_late_rows"]
            if picks:
                out["policy"] = (t["sum_policy_early"] + t["sum_policy_late"]) / picks
                out["accuracy"] = (t["sum_accuracy_early"] + t["sum_accuracy_late"]) / picks
            aux = sum(out[f"aux_{k}"] for k in AUX_NAMES)
            out["loss"] = out["policy"] + self.stepper.aux_weight * aux + (out["stop"] or 0.0)
        out["rows"] = rows
        diverge.check(
            out, where=f"validation after epoch {self.p.epoch + 1} (optimizer step {self.p.opt_steps})", hint=self.hint
        )
        self.hooks.safe_point(World.first_signal(totals[n:]))
        self.hooks.on_advance(1, {})
        return out
