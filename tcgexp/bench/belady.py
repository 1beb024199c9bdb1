"""Belady's optimum (MIN with bypass) for a cache of `capacity` equal-size entries.

Written independently of the policies so the ``plan`` policy can be checked
against it: on a miss with the cache full, drop whichever of the resident
entries and the incoming one is next used furthest in the future (never =
infinitely far). For unit-size entries this maximises hits.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence


def flatten(trace: Sequence[Iterable[Hashable]]) -> list[Hashable]:
    return [key for keys in trace for key in keys]


def belady_hits(accesses: Sequence[Hashable], capacity: int) -> int:
    n = len(accesses)
    never = n + 1
    next_use = [never] * n
    last: dict[Hashable, int] = {}
    for i in range(n - 1, -1, -1):
        next_use[i] = last.get(accesses[i], never)
        last[accesses[i]] = i
    if capacity <= 0:
        return 0
    resident: dict[Hashable, int] = {}  # key -> its next use
    heap: list[tuple[int, int, Hashable]] = []  # (-next use, tiebreak, key), stale entries skipped lazily
    hits = 0
    for i, key in enumerate(accesses):
        nu = next_use[i]
        if key in resident:
            hits += 1
        elif len(resident) >= capacity:
            while True:  # the resident entry used furthest ahead (skip stale heap entries)
                far, _, victim = heap[0]
                if resident.get(victim) == -far:
                    break
                heapq.heappop(heap)
            if -far <= nu:
                continue  # the incoming entry is the furthest: bypass it
            heapq.heappop(heap)
            del resident[victim]
        resident[key] = nu
        heapq.heappush(heap, (-nu, i, key))
    return hits
