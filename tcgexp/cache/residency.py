"""What of a row-group cache stays in RAM, what moves to the SSD spill, and when.

``Residency`` holds the RAM tier (a dict of key -> arrays), the policy that decides it, the spill
tier an evicted entry is written to, and the entries on their way there. It takes no lock of its
own: every method but ``flush`` runs under the owning ``RowGroupCache``'s lock, so an admission or
an eviction is one atomic step with the lookup that caused it. Evictions only *queue* their spill
writes (``spills``); the cache hands the queue to ``flush`` after releasing the lock, because a
spill write is disk I/O and holding the lock there would stall every reader. While a spill is being
written its entry sits in ``spilling``, so a miss that races the write is served from memory.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from tcgexp.cache.policy import Policy, admit
from tcgexp.cache.spill import SpillStore
from tcgexp.cache.spill_files import say_once, write_error
from tcgexp.data.source import Arrays, Key


def make_spill(
    enabled: bool,
    capacity: int,
    budget_bytes: int,
    directory: str | Path | None,
    name: str,
    keep_free: Callable[[Path], int] | None = None,
) -> SpillStore | None:
    """The spill tier, or None: off, nothing to evict (capacity 0), no budget, or a folder it cannot use.
    `keep_free`: bytes its filesystem must keep free (``SpillStore``)."""
    if not (enabled and capacity > 0 and budget_bytes > 0):  # a zero-capacity cache never evicts, never spills
        return None
    directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=f"tcgexp-spill-{name}-"))
    try:
        return SpillStore(directory, budget_bytes, keep_free)
    except OSError as exc:  # unwritable or read-only: the spill is an optimisation, not the run
        # one line for the folder, whatever the number of caches that meet it there (a run's train and val each
        # said it, in the OSError's words); attributed to the cache, so the console shows it as one line
        why = write_error(exc)
        say_once(
            directory.parent,
            why,
            f"no spill under {directory.parent} ({why}), for cache-{name} nor any cache after it there: evicted "
            "row groups are re-decoded from Parquet; give the run a folder it can write (hydra.run.dir=...), or turn spilling off "
            "(cache.spill=false)",
            stacklevel=2,
        )
        return None


class Residency:
    """The RAM tier and its moves, under the owning cache's `lock`; `counts` is the cache's counter dict
    (this class adds evictions, pressure_evictions, bypasses and opt_step_skips to it).

    ``guard_capacity`` ("all", the contract): inside ``in_opt_step`` (``depth`` > 0) capacity evictions
    are blocked too, so a miss at capacity is served uncached; otherwise only pressure evictions are
    blocked, for loaders whose workers read while the trainer is inside a step.
    """

    def __init__(
        self, policy: Policy, spill: SpillStore | None, *, lock: threading.Lock, counts: dict, guard_capacity: bool
    ) -> None:
        self.policy = policy
        self.capacity = policy.capacity
        self.spill = spill
        self.ram: dict[Key, Arrays] = {}
        self.spilling: dict[Key, Arrays] = {}
        self.depth = 0  # in_opt_step nesting
        self.closed = False
        self._lock = lock
        self._n = counts
        self._guard_capacity = guard_capacity

    def admissible(self, key: Key) -> bool:
        """Would ``admit`` cache ``key`` right now?"""
        if self.capacity <= 0:
            return False
        if len(self.policy) < self.capacity:
            return True
        if self.depth > 0 and self._guard_capacity:
            return False
        victim = self.policy.victim(key)
        return victim is not None and victim != key

    def admit(self, key: Key, data: Arrays, spills: list) -> None:
        if self.closed or self.capacity <= 0:
            self._n["bypasses"] += 1
            return
        if self.depth > 0 and self._guard_capacity and len(self.policy) >= self.capacity:
            # in_opt_step: serve without caching rather than evict.
            self._n["opt_step_skips"] += 1
            self._n["bypasses"] += 1
            return
        cached, evicted = admit(self.policy, key)
        for victim in evicted:
            self._evict(victim, spills)
        if cached:
            self.ram[key] = data
        else:
            self._n["bypasses"] += 1
            if self.policy.knows_future:  # needed again, later than all in RAM: the spill keeps it till then
                self._queue_spill(key, data, spills)

    def pressure_evict(self, pressure: bool, spills: list) -> None:
        if not pressure or self.depth > 0:
            return
        victim = self.policy.victim(None)  # transient only: hot is never evicted by pressure
        if victim is not None:
            self.policy.on_remove(victim)
            self._n["pressure_evictions"] += 1
            self._evict(victim, spills)

    def _evict(self, key: Key, spills: list) -> None:
        """Drop ``key`` (already removed from the policy) from RAM; queue its spill."""
        data = self.ram.pop(key)
        self._n["evictions"] += 1
        self._queue_spill(key, data, spills)

    def _queue_spill(self, key: Key, data: Arrays, spills: list) -> None:
        """Queue ``key``'s spill write, when there is a spill, the policy wants it kept and it is neither there nor on
        its way there. (Two workers can each drop the same key while its first write is in flight: a second write
        was refused by the store at once, and its ``flush`` then cleared ``spilling`` under the first, so a miss
        in between found the key nowhere and decoded it again.)"""
        store = self.spill
        if store is None or not store.enabled or key in self.spilling or not self.policy.worth_spilling(key):
            return
        if key in store:  # (after the cheap checks: the store takes its own lock)
            return
        rank = ranks = None
        if self.policy.knows_future:  # snapshot: the store must not touch the policy
            rank = self.policy.next_use(key)
            ranks = {k: self.policy.next_use(k) for k in store.keys()}  # noqa: SIM118 - a policy, not a dict
        self.spilling[key] = data
        spills.append((key, data, rank, ranks))

    def flush(self, spills: list) -> None:
        """Write queued spills: outside the lock (it is taken only to clear each entry's ``spilling``)."""
        for key, data, rank, ranks in spills:
            try:
                self.spill.put(key, data, rank=rank, ranks=ranks)
            finally:
                with self._lock:
                    if self.spilling.get(key) is data:
                        del self.spilling[key]

    def clear(self) -> None:
        """Drop both RAM tiers and the policy's state; nothing is admitted after it."""
        self.closed = True
        for key in self.policy.keys():  # noqa: SIM118 - a policy, not a dict
            self.policy.on_remove(key)
        self.ram.clear()
        self.spilling.clear()
