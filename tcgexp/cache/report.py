"""Turning a cache's counters into the seed's end-of-run tally and rules of thumb.

Pure functions of a counters dict, so a run report (result.json) can be
re-rendered or re-diagnosed later without a live cache.
"""

from __future__ import annotations

# What each of a cache's counters (``RowGroupCache.counters()``) means: the one place the metrics reference
# (docs) reads them from, and what a test holds the counters to (a new counter without an entry fails it).
# Tracked as cache_train/<name> and cache_val/<name>; counts run from the process's start (a resumed run
# counts anew), the others are read at the moment they are tracked.
MEANINGS = {
    "accesses": "row-group reads the trainer or validation asked for (hits + misses; prefetches not counted)",
    "hits": "accesses served from RAM (the hot or transient tier)",
    "misses": "accesses not in RAM: read back from the spill, decoded from Parquet, or joined to a load in flight",
    "hit_rate_pct": "hits / accesses x 100 (0 before the first access)",
    "warm_hit_rate_pct": "the hit rate after warm-up: each row group's first access left out (it can only miss), "
    "and a miss that joined another thread's load counted as served; under 90 % the run "
    "prints why (the working set does not fit cache.capacity)",
    "distinct_keys": "distinct row groups accessed so far (the working set the capacity is measured against)",
    "shared_misses": "misses that waited for another thread's load of the same row group instead of loading it "
    "again (concurrent misses of one key decode once)",
    "rescues": "misses served from an evicted row group still on its way to the spill (no decode, no read)",
    "decodes": "row groups decoded from Parquet",
    "bytes_loaded": "bytes of arrays decoded from Parquet (spill reads and rescues not counted): the I/O and "
    "decode work the cache did not save",
    "bytes_moved": "every byte the cache read to serve its misses and prefetches: bytes_loaded plus ssd_bytes_read "
    "(rescues read nothing); what to compare when asking which policy moves the fewest bytes, since a policy "
    "that thrashes its spill decodes little and still reads a lot",
    "decode_seconds": "wall seconds spent decoding from Parquet, summed over threads",
    "max_key_decode_concurrency": "the most threads ever decoding the same row group at once (1 when in-flight "
    "deduplication works)",
    "prefetches": "row groups loaded ahead of their access by the plan policy's prefetch (not counted as accesses)",
    "evictions": "row groups dropped from RAM, for capacity or memory pressure (spilled when the spill is on)",
    "pressure_evictions": "evictions because memory use passed cache.high_watermark_pct (transient tier only)",
    "bypasses": "loaded row groups served without being kept (capacity 0, no victim, the policy's choice, or "
    "in_opt_step at capacity)",
    "opt_step_skips": "bypasses because a miss arrived inside an optimizer step at capacity "
    "(cache.opt_step_guard=all only)",
    "promotions": "row groups promoted from the transient to the hot tier (hot60: after promotion_hits hits)",
    "resident_hot": "row groups in the hot tier now (pinned: never evicted by pressure)",
    "resident_transient": "row groups in the transient tier now",
    "memory_pct": "the system's memory use (psutil percent) at the last pressure probe",
    "ssd_hits": "misses served from the spill (an .npz under the run's .cache_spill, verified) instead of Parquet",
    "ssd_bytes_read": "bytes of arrays read back from the spill (its hits'), beside bytes_loaded's decodes",
    "ssd_spills": "evicted row groups written to the spill",
    "ssd_resident": "row groups in the spill now",
    "ssd_bytes": "bytes of the spill's files now (at most cache.spill_budget_bytes)",
    "spill_errors": "spill files found unreadable or altered, deleted and decoded again from Parquet",
    "spill_skipped": "evictions not spilled: larger than the budget, or no room worth making",
    "spill_dropped": "spill files deleted to stay within cache.spill_budget_bytes",
    "spill_disabled": "1 once a spill write failed (disk full?) and spilling stopped for the run, else 0",
    "remote_bytes": "bytes this cache's decodes fetched from the object store (0 for a local corpus)",
    "tier_bytes": "bytes this cache's decodes read from the local disk tier of an object-store corpus "
    "(0 for a local corpus)",
}

# Evictions with no SSD hit at all, past this many, mean the spill only costs I/O.
DEAD_SPILL_EVICTIONS = 8
LOW_WARM_HIT_RATE_PCT = 90.0


def with_rates(n: dict) -> dict:
    """`n` (counts) with ``hit_rate_pct``, ``warm_hit_rate_pct`` and ``bytes_moved`` derived from them.

    The warm rate leaves out the first touch of each key (it can only miss) and counts a miss
    that joined another thread's load of the same key as no load of its own. Counts of several
    caches (a distributed run's ranks) may be summed first and the rates derived after.
    """
    n["hit_rate_pct"] = 100.0 * n["hits"] / n["accesses"] if n["accesses"] else 0.0
    n["bytes_moved"] = n["bytes_loaded"] + n["ssd_bytes_read"]
    warm = n["accesses"] - n["distinct_keys"]
    n["warm_hit_rate_pct"] = 100.0 * (n["hits"] + n["shared_misses"]) / warm if warm > 0 else 0.0
    return n


def tally(name: str, c: dict) -> str:
    """The seed's three-line report, e.g. ``[cache-train] hits=85705 misses=5 hit_rate=100.0%``."""
    resident = c["resident_hot"] + c["resident_transient"]
    return (
        f"[cache-{name}] hits={c['hits']} misses={c['misses']} hit_rate={c['hit_rate_pct']:.1f}%\n"
        f"  resident={resident} rg (hot={c['resident_hot']} / transient={c['resident_transient']}) "
        f"promotions={c['promotions']}\n"
        f"  evictions={c['evictions']} ssd_hits={c['ssd_hits']} ssd_spills={c['ssd_spills']} "
        f"ssd_resident={c['ssd_resident']} decoded={c['bytes_loaded'] / 2**20:.1f} MiB"
    )


def diagnose(
    name: str, c: dict, *, policy: str, capacity: int, spill_dir=None, spill_reason: str | None = None
) -> list[str]:
    """The seed's rules of thumb as messages; empty when nothing looks wrong.

    - Hit rate after warm-up (the first touch of each distinct key can only
      miss, so it is left out; a miss that joined another thread's load counts
      as served) under 90 %: the working set does not fit. Not raised for
      ``off`` or capacity 0 (no cache), which never hit. When misses
      were served uncached inside ``in_opt_step``, the message says so.
    - Evictions climbing while ssd_hits stays 0: nothing spilled is ever read
      back, so the spill tier is dead weight.
    - Spill files that failed verification, and a spill disabled by a write error.
    """
    tag = f"cache-{name}"
    out = []
    warm = c["accesses"] - c["distinct_keys"]
    # capacity 0 is no cache at all (every access decoded, as cache=off): nothing to diagnose
    if policy != "off" and capacity > 0 and warm > 0 and c["warm_hit_rate_pct"] < LOW_WARM_HIT_RATE_PCT:
        out.append(
            f"{tag}: hit rate after warm-up is {c['warm_hit_rate_pct']:.1f}% (< 90%) over {warm} "
            f"accesses: the working set ({c['distinct_keys']} row groups) does not fit "
            f"cache.capacity={capacity}; raise cache.capacity, keep tbptt.lane_order=grouped (few row "
            f"groups live at once)"
            + (", or try cache=plan" if policy != "plan" else " (cache=plan already keeps those needed soonest)")
            + (
                f"; {c['opt_step_skips']} misses were served uncached because they arrived inside "
                f"in_opt_step at capacity (cache.opt_step_guard=all; the default, pressure, caches them)"
                if c.get("opt_step_skips")
                else ""
            )
        )
    if spill_dir is not None and c["evictions"] >= max(DEAD_SPILL_EVICTIONS, capacity) and c["ssd_hits"] == 0:
        out.append(
            f"{tag}: evictions={c['evictions']} while ssd_hits=0: the working set churns and the "
            f"SSD spill is dead weight; raise cache.capacity, or turn it off (cache.spill=false)"
        )
    if c["spill_errors"]:
        out.append(
            f"{tag}: {c['spill_errors']} spill files were unreadable or altered and were re-decoded "
            f"from Parquet; check the disk under {spill_dir}"
        )
    if c["spill_disabled"] and spill_dir is not None and spill_reason is not None:  # (a budget of 0 is no error)
        fix = (
            "free space under it, or lower cache.spill_budget_bytes"
            if spill_reason == "the disk is full"
            else "give the run a folder it can write (hydra.run.dir=...), or turn spilling off (cache.spill=false)"
        )
        out.append(
            f"{tag}: spilling to {spill_dir} was turned off after a write error ({spill_reason}); evictions "
            f"now re-decode: {fix}"
        )
    return out
