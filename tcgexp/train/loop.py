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
from typing import Callable

import mlx.core as mx

from . import diverge
from .state import LaneMemory, TrainState
from .step import METRICS, Stepper, add_grads, to_mx


@dataclass
class Hooks:
    """What the loop reports to; run.py wires display, tracking and checkpoints in."""

    on_step: Callable[[dict], None] = lambda m: None  # after every optimizer update
    on_validation: Callable[[dict], None] = lambda m: None
    save: Callable[[str], None] = lambda kind: None  # "latest" | "epoch" | "epoch+best"
    on_phase: Callable[[str, int], None] = lambda name, total: None
    on_advance: Callable[[int, dict], None] = lambda n, fields: None
    # where the run may stop with nothing half-done (a stopping signal, see signals.py): before each
    # epoch, after an applied optimizer step, between validation microbatches
    safe_point: Callable[[], None] = lambda: None


class Loop:
    def __init__(self, *, planner, stepper: Stepper, train_loader, val_loader, train_cache, val_cache,
                 memory: LaneMemory, val_memory: LaneMemory, epochs: int, latest_every_steps: int,
                 progress: TrainState, hooks: Hooks, divergence_hint: str = "") -> None:
        self.planner, self.stepper = planner, stepper
        self.train_loader, self.val_loader = train_loader, val_loader
        self.train_cache, self.val_cache = train_cache, val_cache
        self.memory, self.val_memory = memory, val_memory
        self.accum_steps, self.epochs, self.latest_every = planner.accum_steps, epochs, latest_every_steps
        self.p, self.hooks = progress, hooks
        self.hint = divergence_hint or "a learning rate or loss weight too large"
        self.step_seconds = 0.0

    # -- one epoch of training -----------------------------------------------------------
    def train_epoch(self) -> dict:
        p = self.p
        plan = self.planner.epoch_plan(p.epoch)
        self.train_cache.set_trace(plan.trace())
        if p.position == 0:
            self.memory.reset()  # every lane starts the epoch from zero memory
            p.epoch_microbatches = p.epoch_opt_steps = 0
        self.hooks.on_phase(f"train epoch {p.epoch}", len(plan))
        self.hooks.on_advance(p.position, {})
        acc, window, sums = None, 0, {k: 0.0 for k in METRICS}
        rows, stall0, busy0 = 0, self.train_loader.stall_seconds, self.step_seconds
        for prep in self.train_loader.iterate(plan, start=p.position):
            t0 = time.perf_counter()
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            h0 = self.memory.read(prep, inputs["lane_decisions"].shape[0])
            with self.train_cache.in_opt_step():
                if self.accum_steps == 1:  # one compiled graph: gradients and update together
                    loss, parts, carry, norm = self.stepper.step(inputs, targets, h0)
                    mx.eval(loss, parts, carry, norm, self.stepper.state)
                    applied = True
                else:
                    loss, parts, carry, g = self.stepper.grads(inputs, targets, h0)
                    acc, window = add_grads(acc, g), window + 1
                    applied = window == self.accum_steps or prep.index == len(plan) - 1
                    if applied:  # the last partial window is applied too, before validation
                        norm = self.stepper.apply(acc, mx.array(1.0 / window, dtype=mx.float32))
                        mx.eval(loss, parts, carry, norm, self.stepper.state)
                        acc, window = None, 0
                    else:
                        mx.eval(loss, parts, carry, acc)
            # before anything reads these numbers or the weights they came with: stop on NaN/inf
            values = {"loss": float(loss), **{k: float(parts[k]) for k in METRICS[1:]}}
            if applied:
                values["grad_norm"] = float(norm)
            diverge.check(values, where=f"epoch {p.epoch}, optimizer step {p.opt_steps + 1} (microbatch "
                          f"{prep.index} of {len(plan)})", hint=self.hint)
            self.memory.write(prep, carry)
            self.step_seconds += time.perf_counter() - t0
            p.position, p.microbatches, p.epoch_microbatches = prep.index + 1, p.microbatches + 1, \
                p.epoch_microbatches + 1
            p.rows += prep.rows
            rows += prep.rows
            for k in METRICS:
                sums[k] += values[k] * prep.rows
            if applied:
                lr = float(self.stepper.optimizer.learning_rate)  # what the update just used (the optimizer's schedule)
                p.opt_steps, p.epoch_opt_steps = p.opt_steps + 1, p.epoch_opt_steps + 1
                self.hooks.on_step({**{k: values[k] for k in METRICS}, "lr": lr, "grad_norm": values["grad_norm"],
                                    "rows": p.rows})
                if self.latest_every and p.opt_steps % self.latest_every == 0 and p.position < len(plan):
                    self.hooks.save("latest")  # at a window boundary: nothing half-accumulated to lose
                self.hooks.safe_point()
            self.hooks.on_advance(1, {"loss": values["loss"]})
        self.assert_counts(plan)
        stall, busy = self.train_loader.stall_seconds - stall0, self.step_seconds - busy0
        return {**{k: v / max(rows, 1) for k, v in sums.items()},
                "rows_per_second": rows / max(stall + busy, 1e-9), "data_stall_share": stall / max(stall + busy, 1e-9)}

    def assert_counts(self, plan) -> None:
        p = self.p
        want_steps = plan.optimizer_steps(self.accum_steps)
        if p.epoch_microbatches != len(plan) or p.epoch_opt_steps != want_steps:
            raise RuntimeError(
                f"epoch {p.epoch}: planned {len(plan)} microbatches / {want_steps} optimizer steps, processed "
                f"{p.epoch_microbatches} / {p.epoch_opt_steps}")

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> dict:
        plan = self.planner.validation_plan()
        self.val_cache.set_trace(plan.trace())
        self.val_memory.reset()
        self.hooks.on_phase("validation", len(plan))
        totals: dict[str, float] = {}
        rows = 0
        for prep in self.val_loader.iterate(plan):
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            h0 = self.val_memory.read(prep, inputs["lane_decisions"].shape[0])
            loss, parts, carry, sums = self.stepper.evaluate(inputs, targets, h0)
            mx.eval(loss, parts, carry, sums)
            self.val_memory.write(prep, carry)
            for k in METRICS:
                totals[k] = totals.get(k, 0.0) + float(loss if k == "loss" else parts[k]) * prep.rows
            for k, v in sums.items():
                totals["sum_" + k] = totals.get("sum_" + k, 0.0) + float(v)
            rows += prep.rows
            self.hooks.on_advance(1, {})
            self.hooks.safe_point()  # validation changes no weights: stopping here loses only its time
        if rows != plan.rows:
            raise RuntimeError(f"validation processed {rows} rows, its plan covers {plan.rows}")
        self.hooks.on_phase("metric aggregation", 1)
        out = {k: totals[k] / max(rows, 1) for k in METRICS}
        for part in ("early", "late"):
            n = totals.get(f"sum_{part}_rows", 0.0)
            out[f"policy_{part}"] = totals.get(f"sum_policy_{part}", 0.0) / n if n else None  # no such rows
            out[f"accuracy_{part}"] = totals.get(f"sum_accuracy_{part}", 0.0) / n if n else None
        out["rows"] = rows
        diverge.check(out, where=f"validation after epoch {self.p.epoch} (optimizer step {self.p.opt_steps})",
                      hint=self.hint)
        self.hooks.on_advance(1, {})
        return out

    # -- the run -------------------------------------------------------------------------
    def run(self) -> None:
        p = self.p
        while p.epoch < self.epochs:
            self.hooks.safe_point()
            train = self.train_epoch()
            val = self.validate()
            p.history.append({"epoch": p.epoch, "train": train, "val": val})
            improved = p.best_val_loss is None or val["loss"] < p.best_val_loss  # val["loss"] is finite
            if improved:
                p.best_val_loss, p.best_epoch = val["loss"], p.epoch
            self.hooks.on_validation({**val, "epoch": p.epoch})
            p.epoch, p.position = p.epoch + 1, 0
            self.hooks.on_phase("checkpointing", 1)
            self.hooks.save("epoch+best" if improved else "epoch")
            self.hooks.on_advance(1, {})
