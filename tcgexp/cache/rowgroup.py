"""RowGroupCache: the thread-safe page cache over Parquet row groups.

Tiers, from cheapest to dearest: RAM (hot + transient, as the policy
decides), the SSD spill (``spill.py``), and a Parquet decode; what stays in RAM
and what moves to the spill is ``residency.py``, this module is the access path. The cache never
changes the bytes handed back: whatever tier serves a key, the arrays equal a
direct ``read_row_group(i, columns=...)`` of the projection.

Concurrency, and why it is shaped this way:

- One lock guards every mutation (RAM dict, policy, counters, in-flight
  table), but is *released* around decode and spill I/O, which is where the
  time goes; holding it there would serialize every reader behind one decode.
- Concurrent misses of one key decode once: the first caller registers a
  Future in ``_inflight`` and decodes; later callers wait on it and get the
  same arrays.
- An evicted entry sits in ``spilling`` while its file is written, so a miss
  that races the write is served from memory instead of decoding again
  (``residency.py``).
- Decoding lives in ``source.py`` (one ``ParquetFile`` per thread and file).
- Arrays are marked read-only before anyone sees them: the same objects are
  handed to every caller, so an in-place edit would silently corrupt the cache.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import ClassVar, Self

from omegaconf import MISSING

from tcgexp.cache import report
from tcgexp.cache.policy import Policy, PolicyConfig
from tcgexp.cache.probe import Pressure
from tcgexp.cache.residency import Residency, make_spill
from tcgexp.cache.spill import SpillStore
from tcgexp.data.source import Arrays, Key, ParquetSource, as_key, pack, packed_records
from tcgexp.schema import ALL, INT32_MAX, INT64_MAX, schema, within


@schema("cache")
class CacheConfig:
    """The row-group cache (``RowGroupCache``); the trainer supplies files, columns, spill dir.

    ``policy`` is the residency policy's node (``PolicyConfig``, or the subclass beside a policy
    with knobs of its own).
    """

    _target_: str = MISSING
    _partial_: bool = True
    policy: PolicyConfig = MISSING
    capacity: int = 8  # resident row groups (RAM); the grouped lane order needs only a few; 0 = no cache
    high_watermark_pct: float = 85.0  # psutil memory percent above which transient entries are evicted
    spill: bool = True  # evicted entries go to <run dir>/.cache_spill as .npz
    spill_budget_bytes: int = 2 * 1024**3  # spill never grows past this; 0 = nothing spills
    # what in_opt_step() suppresses: "pressure" (the seed's concern: a memory spike mid-step) or "all"
    # (capacity eviction too; loader threads' misses during a step are then served uncached)
    opt_step_guard: str = "pressure"
    UNPINNED: ClassVar[tuple] = ALL  # where bytes come from never changes what the trainer computes
    CHECKS: ClassVar[tuple] = (
        ("capacity", within(0, INT32_MAX), "in [0, 2**31) row groups (0 = no cache)"),
        ("high_watermark_pct", within(0.0, 100.0, open_lo=True), "in (0, 100]"),
        ("spill_budget_bytes", within(0, INT64_MAX), "in [0, 2**63) bytes (0 = nothing spills)"),
        ("opt_step_guard", lambda v: v in ("pressure", "all"), "'pressure' or 'all'"),
    )


class RowGroupCache:
    """Row groups of ``files`` as dicts of numpy arrays projected to ``columns``.

    Built from the ``cache`` config group (``instantiate``, partial: the trainer supplies
    files, columns, spill dir and name); the knobs' defaults live in its schema.
    ``policy`` is a factory ``policy(capacity) -> Policy`` (the option's ``policy:`` node),
    so each instance (train, val) gets its own.
    """

    def __init__(
        self,
        files: Sequence[str | Path],
        columns: Iterable[str],
        *,
        policy: Callable[[int], Policy],
        capacity: int,
        high_watermark_pct: float,
        spill: bool,
        spill_budget_bytes: int,
        opt_step_guard: str,
        spill_dir: str | Path | None = None,
        memory_probe: Callable[[], float] | None = None,
        name: str = "train",
        keep_free: Callable[[Path], int] | None = None,
    ) -> None:
        self.name = name
        self._source = ParquetSource(files, columns, name=f"cache-{name}")
        self.columns = self._source.columns

        self.high_watermark_pct = float(high_watermark_pct)
        self._pressure = Pressure(memory_probe, self.high_watermark_pct, name)

        self._lock = threading.Lock()
        self._inflight: dict[Key, Future] = {}
        self._decoding: dict[Key, int] = {}
        self._seen: set[Key] = set()
        self._n = dict.fromkeys(
            (
                "accesses",
                "hits",
                "misses",
                "evictions",
                "pressure_evictions",
                "bypasses",
                "opt_step_skips",
                "shared_misses",
                "rescues",
                "decodes",
                "bytes_loaded",
                "prefetches",
                "max_key_decode_concurrency",
            ),
            0,
        )
        self._decode_seconds = 0.0

        made = policy(capacity)
        self._tiers = Residency(
            made,
            make_spill(spill, made.capacity, spill_budget_bytes, spill_dir, name, keep_free),
            lock=self._lock,
            counts=self._n,
            guard_capacity=opt_step_guard == "all",
        )
        # the tiers' parts, by their names here (never rebound: the dict is cleared, not replaced)
        self._policy, self._ram, self._spill = self._tiers.policy, self._tiers.ram, self._tiers.spill
        self.policy_name, self.capacity = made.name, made.capacity

    # -- keys ---------------------------------------------------------------
    @property
    def files(self) -> list[Path]:
        return list(self._source.paths)

    @property
    def spill_dir(self) -> Path | None:
        return self._spill.dir if self._spill is not None else None

    def keep_spill_reserve(self) -> int:
        """Shrink the spill to leave its reserve free again (``SpillStore.keep_reserve``): the bytes dropped."""
        return self._spill.keep_reserve() if self._spill is not None else 0

    def give_back_spill(self, reason: str) -> int:
        """Delete every spill file and stop spilling (a checkpoint needs the disk): the bytes freed."""
        return self._spill.give_back(reason) if self._spill is not None else 0

    def num_row_groups(self, file_index: int) -> int:
        return self._source.row_groups[file_index]

    def keys(self) -> list[Key]:
        """Every valid key, in file then row-group order."""
        return self._source.keys()

    def is_resident(self, key) -> bool:
        with self._lock:
            return as_key(key) in self._ram

    def __len__(self) -> int:
        with self._lock:
            return len(self._ram)

    # -- the access path ----------------------------------------------------
    def get(self, key, t: int | None = None) -> Arrays:
        """The arrays of row group ``key`` (one counted access); ``t`` = plan position.

        The dict is the caller's; the arrays in it are shared and read-only.
        """
        key = self._source.check(key)
        pressure = self._pressure()  # probed outside the lock: psutil reads /proc
        spills: list = []
        rescued = None
        with self._lock:
            self._require_open()
            self._n["accesses"] += 1
            self._seen.add(key)
            self._policy.on_access(key, t)
            data = self._ram.get(key)
            if data is not None:
                self._n["hits"] += 1
                self._policy.on_hit(key)  # the policy counts its own promotions
                owner, fut = False, None
            else:
                self._n["misses"] += 1
                fut = self._inflight.get(key)
                owner = fut is None
                if owner:
                    fut = self._inflight[key] = Future()
                    rescued = self._tiers.spilling.get(key)
                else:
                    self._n["shared_misses"] += 1
            # After the lookup: the entry being read is already in hand (and, for
            # recency policies, no longer the victim).
            self._tiers.pressure_evict(pressure, spills)
        self._tiers.flush(spills)
        if data is not None:
            if packed_records(data) is None:
                # Second touch: the entry is worth packing row-major now (one gather per
                # microbatch afterwards); a first touch, the cold path, stays at decode cost.
                packed = pack(data)
                with self._lock:
                    if self._ram.get(key) is data:
                        self._ram[key] = data = packed
            return dict(data)
        if not owner:
            return dict(fut.result())
        data = self._fill_and_admit(key, fut, rescued)
        return dict(data)

    def prefetch(self, keys: Iterable, t: int | None = None) -> int:
        """Warm the cache with ``keys`` (not counted as accesses); how many were loaded.

        Skips keys already resident or in flight, everything under memory
        pressure, and keys the policy would not admit now (full inside
        ``in_opt_step``, no victim, or plan's bypass), so a prefetch never
        decodes bytes it would throw away. ``t`` is accepted for symmetry with
        ``get``; it does not move the plan cursor (only consumers do).
        """
        loaded = 0
        for key in keys:
            key = self._source.check(key)
            if self._pressure():
                break
            with self._lock:
                self._require_open()
                if key in self._ram or key in self._inflight or not self._tiers.admissible(key):
                    continue
                fut = self._inflight[key] = Future()
                rescued = self._tiers.spilling.get(key)
            self._fill_and_admit(key, fut, rescued)
            with self._lock:
                self._n["prefetches"] += 1
            loaded += 1
        return loaded

    def _fill_and_admit(self, key: Key, fut: Future, rescued: Arrays | None) -> Arrays:
        """Owner of an in-flight key: load it (lock released), admit it, wake waiters."""
        spills: list = []
        try:
            data = rescued if rescued is not None else self._load(key)
            with self._lock:
                if rescued is not None:
                    self._n["rescues"] += 1
                self._tiers.admit(key, data, spills)
        except BaseException as exc:  # waiters must never hang, whatever happened
            with self._lock:
                self._inflight.pop(key, None)
            # Waiters get the error too; an interrupt stays in the thread it hit.
            fut.set_exception(
                exc if isinstance(exc, Exception) else RuntimeError(f"cache-{self.name}: load of {key} was interrupted")
            )
            raise
        with self._lock:
            self._inflight.pop(key, None)
        fut.set_result(data)
        self._tiers.flush(spills)
        return data

    def _load(self, key: Key) -> Arrays:
        if self._spill is not None:
            data = self._spill.load(key, self.columns)
            if data is not None:
                for arr in data.values():
                    arr.flags.writeable = False
                return data
        return self._decode(key)

    def _decode(self, key: Key) -> Arrays:
        with self._lock:
            active = self._decoding[key] = self._decoding.get(key, 0) + 1
            self._n["max_key_decode_concurrency"] = max(self._n["max_key_decode_concurrency"], active)
        try:
            start = time.perf_counter()
            data = self._source.read(key)
            elapsed = time.perf_counter() - start
        finally:
            with self._lock:
                self._decoding[key] -= 1
                if not self._decoding[key]:
                    del self._decoding[key]
        with self._lock:
            self._n["decodes"] += 1
            self._n["bytes_loaded"] += sum(arr.nbytes for arr in data.values())
            self._decode_seconds += elapsed
        return data

    def _require_open(self) -> None:
        if self._tiers.closed:
            raise RuntimeError(f"cache-{self.name} is closed")

    # -- control ------------------------------------------------------------
    @contextlib.contextmanager
    def in_opt_step(self):
        """Suppress every eviction (pressure and capacity) while a step reads resident data.

        Re-entrant, and cache-wide (other threads' gets are affected too). At
        capacity inside it a miss is served without being cached
        (``opt_step_skips``); with ``opt_step_guard="pressure"`` only pressure
        evictions are suppressed.
        """
        with self._lock:
            self._tiers.depth += 1
        try:
            yield self
        finally:
            with self._lock:
                self._tiers.depth = max(0, self._tiers.depth - 1)

    def set_trace(self, trace: Sequence[Iterable]) -> None:
        """The plan's future accesses (``trace[t]`` = keys of position t); plan policy only."""
        with self._lock:
            self._policy.set_trace(trace)

    # -- reporting ----------------------------------------------------------
    def counters(self) -> dict[str, float]:
        with self._lock:
            n = dict(self._n)
            n["promotions"] = self._policy.promotions
            n["resident_hot"] = self._policy.hot_count
            n["resident_transient"] = len(self._ram) - self._policy.hot_count
            n["distinct_keys"] = len(self._seen)
            n["decode_seconds"] = round(self._decode_seconds, 6)
            n["memory_pct"] = self._pressure.pct
        n.update(self._spill.counters() if self._spill is not None else SpillStore.NO_COUNTERS)
        # bytes this cache's decodes took from an object store and from its local tier (0 for a local corpus)
        n["remote_bytes"], n["tier_bytes"] = self._source.stats.remote_bytes, self._source.stats.tier_bytes
        return report.with_rates(n)  # with the rates, every byte moved: decoded and read back from the spill

    def tally(self) -> str:
        """The seed's end-of-run report, three lines (``report.tally``)."""
        return report.tally(self.name, self.counters())

    def diagnose(self) -> list[str]:
        """The seed's rules of thumb, as messages (empty when nothing looks wrong)."""
        return report.diagnose(
            self.name,
            self.counters(),
            policy=self.policy_name,
            capacity=self.capacity,
            spill_dir=self.spill_dir,
            spill_reason=self._spill.disabled_reason if self._spill is not None else None,
        )

    # -- teardown -----------------------------------------------------------
    def close(self) -> None:
        """Drop the RAM tiers, close Parquet handles, remove the spill dir. Idempotent."""
        with self._lock:
            if self._tiers.closed:
                return
            self._tiers.clear()
        self._source.close()
        if self._spill is not None:
            self._spill.close()

    @property
    def closed(self) -> bool:
        return self._tiers.closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"RowGroupCache(name={self.name!r}, policy={self.policy_name!r}, capacity={self.capacity}, "
            f"resident={len(self._ram)}, spill_dir={str(self.spill_dir) if self._spill else None!r})"
        )
