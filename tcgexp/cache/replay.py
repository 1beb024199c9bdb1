"""Offline trace replay: run a plan's access trace through a policy, no data.

The cache and this replay share ``policy.admit`` and the policy objects
themselves, so for a single consumer reading in plan order (no memory
pressure, no opt-step) the hit count here is the hit count the real cache
gets. That makes it cheap to compare policies and capacities for a plan
before a single row group is decoded.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from tcgexp.cache.policy import Key, Policy, _norm_key, admit


def replay(policy: Policy, trace: Sequence[Iterable[Key]], *, set_trace: bool = True) -> dict[str, int]:
    """Run an access trace through ``policy`` alone (no data): hit/miss counts.

    Mirrors ``RowGroupCache.get`` without memory pressure or spill, so it
    predicts the real cache's hits for a single consumer reading in plan order.
    """
    if set_trace:
        policy.set_trace(trace)
    hits = misses = evictions = bypasses = 0
    for t, keys in enumerate(trace):
        for key in keys:
            key = _norm_key(key)
            policy.on_access(key, t)
            if key in policy:
                hits += 1
                policy.on_hit(key)
            else:
                misses += 1
                cached, evicted = admit(policy, key)
                evictions += len(evicted)
                bypasses += not cached
    return {"hits": hits, "misses": misses, "evictions": evictions, "bypasses": bypasses,
            "promotions": policy.promotions}
