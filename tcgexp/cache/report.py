"""Turning a cache's counters into the seed's end-of-run tally and rules of thumb.

Pure functions of a counters dict, so a run report (result.json) can be
re-rendered or re-diagnosed later without a live cache.
"""
from __future__ import annotations

# Evictions with no SSD hit at all, past this many, mean the spill only costs I/O.
DEAD_SPILL_EVICTIONS = 8
LOW_WARM_HIT_RATE_PCT = 90.0


def with_rates(n: dict) -> dict:
    """`n` (counts) with ``hit_rate_pct`` and ``warm_hit_rate_pct`` derived from them.

    The warm rate leaves out the first touch of each key (it can only miss) and counts a miss
    that joined another thread's load of the same key as no load of its own. Counts of several
    caches (a distributed run's ranks) may be summed first and the rates derived after.
    """
    n["hit_rate_pct"] = 100.0 * n["hits"] / n["accesses"] if n["accesses"] else 0.0
    warm = n["accesses"] - n["distinct_keys"]
    n["warm_hit_rate_pct"] = 100.0 * (n["hits"] + n["shared_misses"]) / warm if warm > 0 else 0.0
    return n


def tally(name: str, c: dict) -> str:
    """The seed's three-line report, e.g. ``[cache-train] hits=85705 misses=5 hit_rate=100.0%``."""
    resident = c["resident_hot"] + c["resident_transient"]
    return (f"[cache-{name}] hits={c['hits']} misses={c['misses']} hit_rate={c['hit_rate_pct']:.1f}%\n"
            f"  resident={resident} rg (hot={c['resident_hot']} / transient={c['resident_transient']}) "
            f"promotions={c['promotions']}\n"
            f"  evictions={c['evictions']} ssd_hits={c['ssd_hits']} ssd_spills={c['ssd_spills']} "
            f"ssd_resident={c['ssd_resident']} decoded={c['bytes_loaded'] / 2**20:.1f} MiB")


def diagnose(name: str, c: dict, *, policy: str, capacity: int, spill_dir=None) -> list[str]:
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
        out.append(f"{tag}: hit rate after warm-up is {c['warm_hit_rate_pct']:.1f}% (< 90%) over {warm} "
                   f"accesses: the working set ({c['distinct_keys']} row groups) does not fit "
                   f"cache.capacity={capacity}; raise cache.capacity, keep tbptt.lane_order=grouped (few row "
                   f"groups live at once), or try cache=plan"
                   + (f"; {c['opt_step_skips']} misses were served uncached because they arrived inside "
                      f"in_opt_step at capacity (cache.opt_step_guard=all; the default, pressure, caches them)"
                      if c.get("opt_step_skips") else ""))
    if spill_dir is not None and c["evictions"] >= max(DEAD_SPILL_EVICTIONS, capacity) and c["ssd_hits"] == 0:
        out.append(f"{tag}: evictions={c['evictions']} while ssd_hits=0: the working set churns and the "
                   f"SSD spill is dead weight; raise cache.capacity, or turn it off (cache.spill=false)")
    if c["spill_errors"]:
        out.append(f"{tag}: {c['spill_errors']} spill files were unreadable or altered and were re-decoded "
                   f"from Parquet; check the disk under {spill_dir}")
    if c["spill_disabled"] and spill_dir is not None:
        out.append(f"{tag}: spilling was disabled after a write error (disk full?); evictions now re-decode")
    return out
