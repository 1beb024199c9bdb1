"""Residency policies for the row-group cache: which keys stay in RAM.

A policy sees only keys, never data, and holds no lock: the cache calls it
under its own lock, and an offline tool can replay a plan's access trace
through the very same objects (``replay.py``) to compare policies without
decoding a byte. Keeping the decision logic here and the bytes in
``rowgroup.py`` is what lets a trace replay predict the real cache exactly.

The interface (all O(1) except ``victim`` for ``plan``, O(resident)):

- ``on_access(key, t)`` every access, hit or miss, first; ``t`` = plan position;
- ``on_hit(key)``     a resident key was read; True when it was promoted;
- ``on_insert(key)``  the key became resident (``admit`` calls it);
- ``on_remove(key)``  the key left RAM (eviction or teardown);
- ``victim(incoming=None)`` a transient key to evict, ``None`` when there is
  none (the incoming key is then not cached), or ``incoming`` itself meaning
  "do not cache the incoming key" (Belady with bypass, ``plan`` only);
- ``set_trace(trace)`` / ``advance(t)`` the future access trace and a
  position a consumer is at (no-ops except for ``plan``).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import ClassVar

from omegaconf import MISSING

from tcgexp.data.source import Key, as_key
from tcgexp.schema import INT32_MAX, schema, within

INF = math.inf


@schema("cache.policy")
class PolicyConfig:
    """A residency policy: the cache option's ``policy`` node, built as a factory (the cache supplies capacity).

    A policy with knobs of its own subclasses this beside its class (``Hot60PolicyConfig``) and its
    option's YAML starts from it: ``defaults: [/schema.cache.policy.<name>@policy, _self_]``.
    """

    _target_: str = MISSING
    _partial_: bool = True


@schema("cache.policy", "hot60")
class Hot60PolicyConfig(PolicyConfig):
    # share of capacity pinned in the hot tier; pinned entries survive pressure (capacity < 4 pins most of it)
    hot_fraction: float = 0.6
    promotion_hits: int = 2  # hits in transient before promotion to hot; fewer = quicker to pin, easier to pin wrongly
    CHECKS: ClassVar[tuple] = (
        ("hot_fraction", within(0.0, 1.0), "in [0, 1] (0 = no hot tier)"),
        ("promotion_hits", within(0, INT32_MAX), "in [0, 2**31) hits"),
    )


class Policy:
    """Base class: a flat insertion-ordered resident set with no opinions."""

    name = "base"
    knows_future = False

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self.promotions = 0
        # Insertion order; subclasses that care about recency reorder it.
        self._resident: OrderedDict[Key, None] = OrderedDict()

    # -- membership ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self._resident)

    def __contains__(self, key: Key) -> bool:
        return key in self._resident

    def keys(self) -> list[Key]:
        return list(self._resident)

    def is_hot(self, key: Key) -> bool:
        return False

    @property
    def hot_count(self) -> int:
        return 0

    @property
    def transient_count(self) -> int:
        return len(self._resident) - self.hot_count

    # -- events -------------------------------------------------------------
    def on_access(self, key: Key, t: int | None = None) -> None:
        pass

    def on_hit(self, key: Key) -> bool:
        return False

    def on_insert(self, key: Key) -> None:
        self._resident[key] = None

    def on_remove(self, key: Key) -> None:
        self._resident.pop(key, None)

    def victim(self, incoming: Key | None = None) -> Key | None:
        return next(iter(self._resident), None)

    # -- future knowledge (plan only) ---------------------------------------
    def set_trace(self, trace: Sequence[Iterable[Key]]) -> None:
        pass

    def advance(self, t: int) -> None:
        pass

    def next_use(self, key: Key) -> float:
        """Sequence index of the key's next use; infinity when unknown or never."""
        return INF

    def worth_spilling(self, key: Key) -> bool:
        """Whether an evicted key may be read again (plan: only if it has a next use)."""
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, resident={len(self)})"


class OffPolicy(Policy):
    """Nothing is ever resident: every access decodes (the baseline)."""

    name = "off"

    def __init__(self, capacity: int = 0) -> None:  # any capacity: nothing is ever kept
        super().__init__(0)

    def victim(self, incoming: Key | None = None) -> Key | None:
        return None


class FifoPolicy(Policy):
    """The first-generation flat cache: evict the oldest inserted entry."""

    name = "fifo"  # the base class already is FIFO: hits do not reorder


class LruPolicy(Policy):
    """Flat LRU: a hit moves the key to the most-recent end."""

    name = "lru"

    def on_hit(self, key: Key) -> bool:
        self._resident.move_to_end(key)
        return False


class Hot60Policy(Policy):
    """The seed's tiers: HOT (pinned) over TRANSIENT (LRU).

    A transient entry is promoted once its hit counter reaches
    ``promotion_hits`` and hot has room; the counter is reset on promotion and
    forgotten when the entry leaves RAM (a re-admitted entry starts over, so
    the hot tier only holds what is hot *now*). Victims come only from
    transient: hot entries leave at teardown, so when transient is empty the
    incoming entry is simply not cached.
    """

    name = "hot60"

    def __init__(self, capacity: int, *, hot_fraction: float, promotion_hits: int) -> None:
        super().__init__(capacity)
        if not 0.0 <= hot_fraction <= 1.0:
            raise ValueError(f"hot_fraction must be in [0, 1], got {hot_fraction}")
        self.hot_capacity = math.floor(hot_fraction * self.capacity)
        self.promotion_hits = int(promotion_hits)
        self._hot: OrderedDict[Key, None] = OrderedDict()
        # self._resident (from the base) is the transient tier, kept in LRU order.
        self._hits: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._hot) + len(self._resident)

    def __contains__(self, key: Key) -> bool:
        return key in self._hot or key in self._resident

    def keys(self) -> list[Key]:
        return list(self._hot) + list(self._resident)

    def is_hot(self, key: Key) -> bool:
        return key in self._hot

    @property
    def hot_count(self) -> int:
        return len(self._hot)

    @property
    def transient_count(self) -> int:
        return len(self._resident)

    def _promote(self, key: Key) -> None:
        self._resident.pop(key, None)
        self._hits.pop(key, None)
        self._hot[key] = None
        self.promotions += 1

    def on_insert(self, key: Key) -> None:
        # promotion_hits <= 0 means "hot on first sight" while hot has room.
        if self.promotion_hits <= 0 and len(self._hot) < self.hot_capacity:
            self._promote(key)
            return
        self._resident[key] = None
        self._hits[key] = 0

    def on_hit(self, key: Key) -> bool:
        if key in self._hot:
            return False
        self._resident.move_to_end(key)
        count = self._hits.get(key, 0) + 1
        self._hits[key] = count
        if count >= self.promotion_hits and len(self._hot) < self.hot_capacity:
            self._promote(key)
            return True
        return False

    def on_remove(self, key: Key) -> None:
        self._resident.pop(key, None)
        self._hot.pop(key, None)
        self._hits.pop(key, None)

    def victim(self, incoming: Key | None = None) -> Key | None:
        return next(iter(self._resident), None)  # LRU transient; never hot


class PlanPolicy(Policy):
    """Belady with bypass over the planner's known future access trace.

    ``trace[t]`` is the tuple of keys plan position ``t`` (a microbatch)
    touches. The trace is flattened into one access sequence so "furthest next
    use" has no ties except "never again"; within a position the tuple order is
    the assumed access order. Each read of ``key`` at ``t`` consumes exactly
    that occurrence, and a key's next use is its first unconsumed occurrence
    at or after the floor: the first position with anything left to read (or
    the lowest position reported since ``set_trace``, so a run resumed
    mid-plan does not wait for positions it skips). Tracking occurrences, not
    "the current position", keeps the choice right when several loader
    workers read positions t, t+1, ... out of order; replaying the trace in
    order makes exactly Belady's choices. Ties (only "never again", or no trace
    at all) evict the least recently used resident, so without a trace the
    policy degrades to LRU rather than refusing to cache. The trainer's trace is the epoch's and the next
    epoch's (``Loop.begin_epoch``), so a key evicted or bypassed for a later epoch is worth spilling.
    """

    name = "plan"
    knows_future = True

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.set_trace([])

    def set_trace(self, trace: Sequence[Iterable[Key]]) -> None:
        positions: dict[Key, list[int]] = {}  # key -> sorted plan positions
        sequence: dict[Key, list[int]] = {}  # parallel: index in the flattened trace
        left: list[int] = []  # per position: occurrences not read yet
        s = 0
        for t, keys in enumerate(trace):
            distinct = list(dict.fromkeys(as_key(key) for key in keys))  # one use per position
            for key in distinct:
                positions.setdefault(key, []).append(t)
                sequence.setdefault(key, []).append(s)
                s += 1
            left.append(len(distinct))
        self._positions, self._sequence, self._left = positions, sequence, left
        self._done: set[tuple[Key, int]] = set()  # (key, position) occurrences already read
        self._low = 0  # first position with an occurrence left to read
        self._start: int | None = None  # lowest position any consumer reported

    def advance(self, t: int) -> None:
        t = int(t)
        if self._start is None or t < self._start:
            self._start = t

    def on_access(self, key: Key, t: int | None = None) -> None:
        if t is None:
            return  # no position: nothing can be marked as read
        self.advance(t)
        positions = self._positions.get(key)
        if not positions or (key, t) in self._done:
            return
        i = bisect_left(positions, t)
        if i == len(positions) or positions[i] != t:
            return  # an access the plan did not predict: nothing to consume
        self._done.add((key, t))
        self._left[t] -= 1
        while self._low < len(self._left) and self._left[self._low] == 0:
            self._low += 1

    def on_hit(self, key: Key) -> bool:
        self._resident.move_to_end(key)  # recency only breaks ties
        return False

    def next_use(self, key: Key) -> float:
        positions = self._positions.get(key)
        if not positions:
            return INF
        i = bisect_left(positions, max(self._low, self._start or 0))
        while i < len(positions) and (key, positions[i]) in self._done:
            i += 1  # read ahead of the floor by another worker; only a few at most
        return self._sequence[key][i] if i < len(positions) else INF

    def worth_spilling(self, key: Key) -> bool:
        return self.next_use(key) != INF

    def victim(self, incoming: Key | None = None) -> Key | None:
        best, best_use = None, -1.0
        for key in self._resident:  # LRU first, strict '>' keeps the LRU on ties
            use = self.next_use(key)
            if use > best_use:
                best, best_use = key, use
        if incoming is not None and incoming not in self._resident and self.next_use(incoming) > best_use:
            return incoming  # bypass: the newcomer is needed last
        return best


def admit(policy: Policy, key: Key) -> tuple[bool, list[Key]]:
    """Make room for ``key`` and insert it: (cached?, keys evicted to make room).

    Shared by the cache and ``replay`` so both follow one admission rule: evict
    victims while full; stop without caching when the policy has no victim or
    names the incoming key itself.
    """
    evicted: list[Key] = []
    while len(policy) >= policy.capacity:
        victim = policy.victim(key)
        if victim is None or victim == key:
            return False, evicted
        policy.on_remove(victim)
        evicted.append(victim)
    policy.on_insert(key)
    return True, evicted
