"""The optimizer window: the microbatches of one update, their gradients summed, one all-reduce, one update.

The loop (``loop.py``) adds each planned microbatch to the window and closes it every ``accum_steps``
microbatches (and at the plan's end); a window of one microbatch on a world of one is fused and queued
(``Queued``), read back after the next microbatch is dispatched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ..learn import diverge
from ..learn.state import LaneMemory
from ..learn.step import Stepper, add_grads, to_mx
from ..lifecycle.distributed import Sync, World
from ..plan.loader import Skip

# the step scalars reduced with the gradients: real microbatches, rows, each metric's sum over rows (the model's
# metrics: Stepper.metrics), then one slot per rank for its stop signal (World.signal_row)
REAL, ROWS, SUMS = 0, 1, 2


@dataclass
class Update:
    """A closed window: the values it reports, the reduced scalars, the signal the ranks agreed on."""

    values: dict
    total: np.ndarray
    agreed: str | None


@dataclass
class Queued:
    """A fused window (one microbatch, gradients and update in one graph) dispatched and not yet read
    back: its values vector (the metrics, gradient norm, learning rate) and this rank's scalars so far."""

    out: mx.array
    local: np.ndarray
    where: str


class Window:
    """The microbatches of one optimizer update: their gradients summed, their scalars gathered, applied together.

    Gradients are summed in one slot per shard this process runs (one, unless ``tbptt.shards``
    interleaves several ranks' plans here) and added in shard order at the close: the association
    the ranks' all-reduce has (exact for two). A window of one microbatch on a world of one runs
    gradients and update as one compiled graph (``Stepper.step``) and is *queued*, not waited for:
    its lane memory stays in MLX (``LaneMemory``), so the loop dispatches the next microbatch
    before reading this one's values back (``read``). Every window reports its global means (a
    window of one microbatch: that microbatch's values) and is checked for divergence before
    anything reads them.
    """

    def __init__(self, stepper: Stepper, world: World, *, size: int, slots: int, hint: str) -> None:
        self.stepper, self.world, self.size, self.slots, self.hint = stepper, world, size, slots, hint
        self.metrics = stepper.metrics
        self.signals = SUMS + len(self.metrics)  # where the ranks' stop signal slots begin
        self.sync = Sync(world, stepper.model.trainable_parameters())
        self.fused = size == 1 and world.size == 1
        self.reduce_seconds = 0.0
        self.clear()

    def clear(self) -> None:
        self.accs: list = [None] * self.slots
        self.count, self.out = 0, None
        self.local = np.zeros(self.signals + self.world.size)  # this window's scalars on this rank

    def add(self, prep, memory: LaneMemory) -> float | None:
        """One microbatch's gradients, its lanes' memories read and written back: its loss (None for
        shard padding, where this rank has no rows but still steps, and for a fused window: read later)."""
        self.count += 1
        if isinstance(prep, Skip):
            return None
        inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
        h0 = memory.read(prep, inputs["lane_decisions"].shape[0])
        self.local[REAL] += 1
        self.local[ROWS] += prep.rows
        if self.fused:
            self.out, carry = self.stepper.step(inputs, targets, h0)
            memory.write(prep, carry)
            mx.async_eval(self.out, memory.table, self.stepper.state)
            return None
        values, carry, g = self.stepper.grads(inputs, targets, h0)
        slot = prep.index % self.slots  # the interleaved plan's shard of this position
        self.accs[slot] = add_grads(self.accs[slot], g)
        memory.write(prep, carry)
        mx.eval(values, memory.table, self.accs[slot])
        got = np.array(values, np.float64)  # every value of the microbatch in one transfer
        self.local[SUMS : self.signals] += got * prep.rows
        return float(got[0])

    def ends_at(self, index: int, length: int) -> bool:
        """Whether the window closes after plan position `index`: full, or the plan's last (partial) one."""
        return self.count == self.size or index == length - 1

    def close(self, signame: str | None, where: str) -> Update | Queued:
        """The window's one all-reduce (gradients, scalars and every rank's stop signal together) and its
        update; a fused window's update is already queued: it is returned unread (``read``)."""
        if self.fused:
            queued = Queued(self.out, self.local, where)
            self.clear()
            return queued
        self.local[self.signals :] = self.world.signal_row(signame)
        r0 = time.perf_counter()
        acc = None
        for a in self.accs:  # per-shard sums in shard order (one slot without shards)
            acc = a if acc is None else (acc if a is None else add_grads(acc, a))
        acc, total = self.sync.reduce(acc, self.local, where)
        self.reduce_seconds += time.perf_counter() - r0
        norm = self.stepper.apply(acc, mx.array(1.0 / total[REAL], dtype=mx.float32))
        mx.eval(norm, self.stepper.state)
        values = {k: total[SUMS + i] / total[ROWS] for i, k in enumerate(self.metrics)}
        values["grad_norm"] = float(norm)
        diverge.check(values, where=where, hint=self.hint)  # the same global values on every rank
        update = Update(values, total.copy(), World.first_signal(total[self.signals :]))
        self.clear()
        return update

    def read(self, queued: Queued, signame: str | None) -> tuple[Update, float]:
        """A queued window's values, read back (waiting for its step) and checked: (its update, the learning
        rate it used). `signame`: this process's stop signal now (a world of one agrees with itself)."""
        got = np.array(queued.out, np.float64)  # every value of the microbatch in one transfer
        total = queued.local
        m = len(self.metrics)
        values = dict(zip(self.metrics, got[:m].tolist()))
        values["grad_norm"] = float(got[m])
        diverge.check(values, where=queued.where, hint=self.hint)  # before anything reads them
        total[SUMS : self.signals] = got[:m] * total[ROWS]
        total[self.signals :] = self.world.signal_row(signame)
        return Update(values, total, World.first_signal(total[self.signals :])), float(got[m + 1])
