"""The training loop: epochs of planned microbatches, validation, checkpoints.

Reads as a sequence: plan the epoch -> stream its microbatches through the
cache and loader -> compute gradients with each lane's carried memory ->
apply every ``accum_steps`` (and the last partial window) -> validate ->
checkpoint. Planned and processed counts are asserted at the end of every
epoch; a mismatch is an error, never a silently short epoch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import mlx.core as mx
import numpy as np

from ..plan.loader import Skip
from . import diverge
from .distributed import Sync, World
from .state import LaneMemory, TrainState
from .step import METRICS, Stepper, add_grads, to_mx

SUM_KEYS = ("early_rows", "late_rows", "policy_early", "policy_late", "accuracy_early", "accuracy_late")


@dataclass
class Hooks:
    """What the loop reports to; run.py wires display, tracking and checkpoints in."""

    on_step: Callable[[dict], None] = lambda m: None  # after every optimizer update
    on_validation: Callable[[dict], None] = lambda m: None
    save: Callable[[str], None] = lambda kind: None  # "latest" | "epoch" | "epoch+best"
    on_phase: Callable[[str, int], None] = lambda name, total: None
    on_advance: Callable[[int, dict], None] = lambda n, fields: None
    # where the run may stop with nothing half-done (a stopping signal, see signals.py): before each
    # epoch, after an applied optimizer step, between validation microbatches. With several ranks the
    # loop passes the signal all ranks agreed on (None: go on), so every rank stops at the same point.
    safe_point: Callable[..., None] = lambda agreed=None: None
    stop_requested: Callable[[], Optional[str]] = lambda: None  # this rank's pending signal, if any


# the step scalars reduced with the gradients: real microbatches, rows, each metric's sum over rows,
# then one slot per rank for its stop signal (World.signal_row)
REAL, ROWS, SUMS = 0, 1, 2
SIGNALS = SUMS + len(METRICS)


class Loop:
    def __init__(self, *, planner, stepper: Stepper, train_loader, val_loader, train_cache, val_cache,
                 memory: LaneMemory, val_memory: LaneMemory, epochs: int, latest_every_steps: int,
                 progress: TrainState, hooks: Hooks, divergence_hint: str = "", world: Optional[World] = None
                 ) -> None:
        self.planner, self.stepper = planner, stepper
        self.train_loader, self.val_loader = train_loader, val_loader
        self.train_cache, self.val_cache = train_cache, val_cache
        self.memory, self.val_memory = memory, val_memory
        self.accum_steps, self.epochs, self.latest_every = planner.accum_steps, epochs, latest_every_steps
        self.p, self.hooks = progress, hooks
        self.hint = divergence_hint or "a learning rate or loss weight too large"
        self.world = world or World()
        self.sync = Sync(self.world, stepper.model.trainable_parameters())
        # one compiled graph for gradients and update, where no gradient has to leave the process
        self.fused = self.accum_steps == 1 and self.world.size == 1
        # one process running several shards in turn keeps one sum per shard and adds them at the end of
        # the window, in shard order: the association the ranks' all-reduce has (exact for two)
        self.slots = planner.shards if self.world.size == 1 and planner.shards > 1 else 1
        self.step_seconds = self.reduce_seconds = 0.0

    # -- one epoch of training -----------------------------------------------------------
    def train_epoch(self) -> dict:
        p, world = self.p, self.world
        plan = self.planner.epoch_plan(p.epoch)
        self.train_cache.set_trace(plan.trace())
        if p.position == 0:
            self.memory.reset()  # every lane starts the epoch from zero memory
            p.epoch_microbatches = p.epoch_opt_steps = p.epoch_real = 0
        self.hooks.on_phase(f"train epoch {p.epoch + 1}/{self.epochs}", len(plan))
        self.hooks.on_advance(p.position, {})
        accs, window, sums = [None] * self.slots, 0, {k: 0.0 for k in METRICS}
        local = np.zeros(SIGNALS + world.size)  # this window's scalars on this rank
        rows, stall0, busy0 = 0, self.train_loader.stall_seconds, self.step_seconds
        for prep in self.train_loader.iterate(plan, start=p.position):
            t0 = time.perf_counter()
            skip = isinstance(prep, Skip)  # shard padding: this rank has no rows here, it still steps
            where = f"epoch {p.epoch + 1}, optimizer step {p.opt_steps + 1} (microbatch {prep.index} of {len(plan)})"
            with self.train_cache.in_opt_step():
                if not skip:
                    inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
                    h0 = self.memory.read(prep, inputs["lane_decisions"].shape[0])
                if self.fused:
                    loss, parts, carry, norm = self.stepper.step(inputs, targets, h0)
                    mx.eval(loss, parts, carry, norm, self.stepper.state)
                    applied = True
                else:
                    if not skip:
                        loss, parts, carry, g = self.stepper.grads(inputs, targets, h0)
                        slot = prep.index % self.slots  # the interleaved plan's shard of this position
                        accs[slot] = add_grads(accs[slot], g)
                        mx.eval(loss, parts, carry, accs[slot])
                    window += 1
                    applied = window == self.accum_steps or prep.index == len(plan) - 1
            if not skip:
                values = {"loss": float(loss), **{k: float(parts[k]) for k in METRICS[1:]}}
                if world.size == 1:  # several ranks check the window's global values instead (below)
                    if self.fused:
                        values["grad_norm"] = float(norm)
                    diverge.check(values, where=where, hint=self.hint)  # before anything reads them
                self.memory.write(prep, carry)
                local[REAL] += 1
                local[ROWS] += prep.rows
                local[SUMS:SIGNALS] += [values[k] * prep.rows for k in METRICS]
            agreed = None
            if applied and self.fused:
                window_values, total = values, local
            elif applied:
                window_values, total, agreed = self.close_window(accs, local, values if not skip else None, where)
                accs, window = [None] * self.slots, 0
            self.step_seconds += time.perf_counter() - t0
            p.position, p.microbatches, p.epoch_microbatches = prep.index + 1, p.microbatches + 1, \
                p.epoch_microbatches + 1
            if applied:
                p.real, p.epoch_real = p.real + int(total[REAL]), p.epoch_real + int(total[REAL])
                p.rows += int(total[ROWS])
                rows += int(total[ROWS])
                for i, k in enumerate(METRICS):
                    sums[k] += float(total[SUMS + i])
                local[:] = 0.0
                lr = float(self.stepper.optimizer.learning_rate)  # what the update just used (the optimizer's schedule)
                p.opt_steps, p.epoch_opt_steps = p.opt_steps + 1, p.epoch_opt_steps + 1
                self.hooks.on_step({**{k: window_values[k] for k in METRICS}, "lr": lr,
                                    "grad_norm": window_values["grad_norm"], "rows": p.rows})
                if self.latest_every and p.opt_steps % self.latest_every == 0 and p.position < len(plan):
                    self.hooks.save("latest")  # at a window boundary: nothing half-accumulated to lose
                self.hooks.safe_point(agreed)
            self.hooks.on_advance(1, {"loss": values["loss"]} if not skip else {})
        self.assert_counts(plan)
        stall, busy = self.train_loader.stall_seconds - stall0, self.step_seconds - busy0
        return {**{k: v / max(rows, 1) for k, v in sums.items()},
                "rows_per_second": rows / max(stall + busy, 1e-9), "data_stall_share": stall / max(stall + busy, 1e-9)}

    def close_window(self, accs: list, local: np.ndarray, last: Optional[dict], where: str):
        """The window's one all-reduce (gradients and scalars together) and its update.

        Returns (the values the step reports, the reduced scalars, the stop signal the ranks agreed
        on). Several ranks report and check the window's global means; one process without shards
        reports its last microbatch's values, as it always has."""
        local[SIGNALS:] = self.world.signal_row(self.hooks.stop_requested())
        r0 = time.perf_counter()
        acc = None
        for a in accs:  # per-shard sums in shard order (one slot without shards)
            acc = a if acc is None else (acc if a is None else add_grads(acc, a))
        acc, total = self.sync.reduce(acc, local, where)
        self.reduce_seconds += time.perf_counter() - r0
        norm = self.stepper.apply(acc, mx.array(1.0 / total[REAL], dtype=mx.float32))
        mx.eval(norm, self.stepper.state)
        if self.world.size == 1 and self.planner.shards == 1 and last is not None:
            values = dict(last)
        else:
            values = {k: total[SUMS + i] / total[ROWS] for i, k in enumerate(METRICS)}
        values["grad_norm"] = float(norm)
        agreed = None
        if self.world.size > 1:
            diverge.check(values, where=where, hint=self.hint)
            agreed = World.first_signal(total[SIGNALS:])
        return values, total, agreed

    def assert_counts(self, plan) -> None:
        p = self.p
        want_steps = plan.optimizer_steps(self.accum_steps)
        want_real = self.planner.real_microbatches(p.epoch)  # every shard's, with no padding
        if p.epoch_microbatches != len(plan) or p.epoch_opt_steps != want_steps or p.epoch_real != want_real:
            raise RuntimeError(
                f"epoch {p.epoch + 1}: planned {want_real} microbatches ({len(plan)} positions) / {want_steps} "
                f"optimizer steps, processed {p.epoch_real} ({p.epoch_microbatches} positions) / {p.epoch_opt_steps}"
                + (f" over {self.world.size} ranks" if self.world.size > 1 else ""))

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> dict:
        plan = self.planner.validation_plan()  # this rank's share when there are several
        self.val_cache.set_trace(plan.trace())
        self.val_memory.reset()
        self.hooks.on_phase("validation", len(plan))
        keys = [*METRICS, *(f"sum_{k}" for k in SUM_KEYS), "rows"]
        totals = np.zeros(len(keys) + self.world.size)  # + every rank's stop signal slot
        for prep in self.val_loader.iterate(plan):
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            h0 = self.val_memory.read(prep, inputs["lane_decisions"].shape[0])
            loss, parts, carry, sums = self.stepper.evaluate(inputs, targets, h0)
            mx.eval(loss, parts, carry, sums)
            self.val_memory.write(prep, carry)
            totals[:len(METRICS)] += [float(loss if k == "loss" else parts[k]) * prep.rows for k in METRICS]
            totals[len(METRICS):len(METRICS) + len(SUM_KEYS)] += [float(sums[k]) for k in SUM_KEYS]
            totals[len(keys) - 1] += prep.rows
            self.hooks.on_advance(1, {})
            if self.world.size == 1:
                self.hooks.safe_point()  # validation changes no weights: stopping here loses only its time
        if int(totals[len(keys) - 1]) != plan.rows:
            raise RuntimeError(f"validation processed {int(totals[len(keys) - 1])} rows, its plan covers {plan.rows}")
        if self.world.size > 1:  # every rank's share: one all-reduce of the sums (and of who must stop)
            totals[len(keys):] = self.world.signal_row(self.hooks.stop_requested())
            totals = np.array(self.world.all_sum(mx.array(totals), f"validation after epoch {self.p.epoch + 1}"))
            want = self.planner.split_rows("val")
            if int(totals[len(keys) - 1]) != want:
                raise RuntimeError(f"validation processed {int(totals[len(keys) - 1])} rows over "
                                   f"{self.world.size} ranks, the split has {want}")
        t = dict(zip(keys, totals.tolist()))
        rows = int(t["rows"])
        self.hooks.on_phase("metric aggregation", 1)
        out = {k: t[k] / max(rows, 1) for k in METRICS}
        for part in ("early", "late"):
            n = t[f"sum_{part}_rows"]
            out[f"policy_{part}"] = t[f"sum_policy_{part}"] / n if n else None  # no such rows
            out[f"accuracy_{part}"] = t[f"sum_accuracy_{part}"] / n if n else None
        out["rows"] = rows
        diverge.check(out, where=f"validation after epoch {self.p.epoch + 1} (optimizer step {self.p.opt_steps})",
                      hint=self.hint)
        if self.world.size > 1:
            self.hooks.safe_point(World.first_signal(totals[len(keys):]))
        self.hooks.on_advance(1, {})
        return out

    # -- the run -------------------------------------------------------------------------
    def run(self) -> None:
        p = self.p
        while p.epoch < self.epochs:
            if self.world.size > 1:  # all ranks decide together whether a signal stops them here
                start = f"the start of epoch {p.epoch + 1}"
                self.hooks.safe_point(self.world.agree(self.hooks.stop_requested(), start))
            else:
                self.hooks.safe_point()
            train = self.train_epoch()
            val = self.validate()
            done = p.epoch + 1  # this epoch, as people count: the first is epoch 1 (and epoch_0001/)
            p.history.append({"epoch": done, "train": train, "val": val})
            improved = p.best_val_loss is None or val["loss"] < p.best_val_loss  # val["loss"] is finite
            if improved:
                p.best_val_loss, p.best_epoch = val["loss"], done
            self.hooks.on_validation({**val, "epoch": done})
            p.epoch, p.position = p.epoch + 1, 0
            self.hooks.on_phase("checkpointing", 1)
            self.hooks.save("epoch+best" if improved else "epoch")
            self.hooks.on_advance(1, {})
