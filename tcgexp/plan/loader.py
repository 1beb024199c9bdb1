"""The loader: each planned microbatch becomes ready numpy arrays, worked ahead in plan order.

``workers`` threads (the ``loader`` group) assemble microbatches ahead of the trainer (row
groups through the cache, rows gathered with one fancy-index per row group
and column: no per-row Python). At most ``depth`` assembled batches wait, so
memory stays bounded. The consumer receives them strictly in plan order and
the time it spends waiting is the data stall.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
from omegaconf import MISSING

from ..data.source import (
    Key,
    ParquetSource,  # per-thread file handles: safe under workers
    packed_records,
)
from ..schema import ALL, schema, within
from .plan import Microbatch, Plan

# What the trainer reads per row (lane columns come from the plan, not the file).
WAIT_POLL_S = 0.2  # how often a wait for a batch asks the consumer whether to go on (stop_waiting)
TRAIN_COLUMNS = [
    "features",
    "action_mask",
    "label",
    "would_ko",
    "would_ko_valid",
    "aux_ko",
    "aux_prize_delta",
    "aux_terminal",
    "aux_return",
    "aux_valid",
]
# What the option head reads besides (a game whose decisions offer options, each with a vector: the model's
# ``option_dim``; docs/extending.md#another-game): the options' vectors, and what its targets are made of
OPTION_COLUMNS = ["option_features", "single_option", "substep", "picks", "min_count", "max_count"]


def train_columns(option_dim: int) -> list[str]:
    """The columns a run's loaders read: ``TRAIN_COLUMNS``, and ``OPTION_COLUMNS`` for the option head."""
    return TRAIN_COLUMNS + OPTION_COLUMNS if option_dim else list(TRAIN_COLUMNS)


@schema("loader")
class LoaderConfig:
    """Threads turning planned microbatches into arrays ahead of the step (``Loader``); built per cache."""

    _target_: str = MISSING
    _partial_: bool = True
    workers: int = 1  # threads assembling microbatches ahead in plan order (each holds ~2 batches); 0 = inline
    UNPINNED: ClassVar[tuple] = ALL
    CHECKS: ClassVar[tuple] = (("workers", within(0, 256), "in [0, 256] threads (0 = in the training thread)"),)


class RowGroupSource(Protocol):
    def get(self, key: Key, t: int | None = None) -> dict[str, np.ndarray]: ...


class DirectSource:
    """Row groups read straight from Parquet, no cache: the reference every cache must equal."""

    def __init__(self, files: Sequence, columns: Sequence[str] = TRAIN_COLUMNS) -> None:
        self._source = ParquetSource(files, columns, name="direct")

    def get(self, key: Key, t: int | None = None) -> dict[str, np.ndarray]:
        return self._source.read(key)


@dataclass
class Batch:
    mb: Microbatch  # the plan's layout: row_lane, row_dec, lane_ids, lane_fresh, ...
    arrays: dict[str, np.ndarray]  # column -> [R, ...] rows in microbatch row order

    @property
    def index(self) -> int:
        return self.mb.index


@dataclass
class Skip:
    """A padding position of a shard (no rows): the trainer computes nothing, its rank still steps."""

    index: int


def assemble(mb: Microbatch, source: RowGroupSource, columns: Sequence[str]) -> Batch:
    """Gather the microbatch's rows from each row group it touches, in microbatch row order."""

    got = {key: source.get(key, t=mb.index) for key in mb.take}
    packed = [packed_records(arrays) for arrays in got.values()]
    if all(p is not None for p in packed) and len({p[1] for p in packed}) == 1:
        # fast path: whole records, one gather per row group (the cache packs what it decodes)
        dtype = packed[0][1]
        if len(mb.take) == 1:
            ((rows, _),) = mb.take.values()
            raw = packed[0][0].take(rows, axis=0)
        else:
            raw = np.empty((mb.rows, dtype.itemsize), np.uint8)
            for (rows, pos), (src, _) in zip(mb.take.values(), packed):
                raw[pos] = src.take(rows, axis=0)
        records = raw.view(dtype).reshape(mb.rows)
        return Batch(mb, {col: records[col] for col in columns})
    out: dict[str, np.ndarray] = {}
    for (rows, pos), arrays in zip(mb.take.values(), got.values()):
        for col in columns:
            src = arrays[col]
            if col not in out:
                out[col] = np.empty((mb.rows,) + src.shape[1:], dtype=src.dtype)
            if len(mb.take) == 1:
                np.take(src, rows, axis=0, out=out[col])
            else:
                out[col][pos] = src[rows]
    return Batch(mb, out)


class Loader:
    def __init__(
        self,
        source: RowGroupSource,
        columns: Sequence[str] = TRAIN_COLUMNS,
        *,
        workers: int,
        depth: int | None = None,
        transform: Callable[[Batch], Any] | None = None,
    ) -> None:
        self.source, self.columns = source, list(columns)
        self.transform = transform  # runs in the worker too (e.g. padding for the compiled step)
        self.workers = max(0, int(workers))
        self.depth = depth if depth is not None else max(2, 2 * self.workers)
        self.stall_seconds = 0.0  # consumer time spent waiting for a batch, all iterations
        self.batches = 0
        # set by the consumer: while it waits for a batch, asked every WAIT_POLL_S; an exception it returns ends the
        # wait (raised), and the workers are then not waited for (a store that stopped answering holds them)
        self.stop_waiting: Callable[[], BaseException | None] | None = None

    def _build_and_work(self, at: Callable[[int], Microbatch], i: int) -> Any:
        return self._work(at(i))

    def _work(self, mb: Microbatch) -> Any:
        if not mb.rows:
            return Skip(mb.index)
        batch = assemble(mb, self.source, self.columns)
        return self.transform(batch) if self.transform else batch

    def iterate(self, plan: Plan, start: int = 0) -> Iterator[Any]:
        """Batches of `plan` from position `start` (a resumed epoch starts mid-plan)."""
        if self.workers == 0:
            for mb in plan.microbatches[start:]:
                t0 = time.perf_counter()
                batch = self._work(mb)
                self.stall_seconds += time.perf_counter() - t0
                self.batches += 1
                yield batch
            return
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tcgexp-loader")
        pending: deque[Future] = deque()
        # the workers build each microbatch from the plan too (~20 numpy calls): not the training thread's work
        mbs = plan.microbatches[start:]
        at = mbs.at if hasattr(mbs, "at") else mbs.__getitem__
        todo = iter(range(len(mbs)))
        try:
            for i in todo:
                pending.append(pool.submit(self._build_and_work, at, i))
                if len(pending) >= self.depth:
                    break
            while pending:
                t0 = time.perf_counter()
                batch = self._wait(pending.popleft())
                self.stall_seconds += time.perf_counter() - t0
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(self._build_and_work, at, nxt))
                self.batches += 1
                yield batch
        finally:
            for fut in pending:
                fut.cancel()
            pool.shutdown(wait=self.stop_waiting is None or self.stop_waiting() is None, cancel_futures=True)

    def _wait(self, future: Future) -> Any:
        if self.stop_waiting is None:
            return future.result()
        while True:
            try:
                return future.result(timeout=WAIT_POLL_S)
            except TimeoutError:
                stop = self.stop_waiting()
                if stop is not None:
                    raise stop from None
