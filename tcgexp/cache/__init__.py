"""The row-group cache: a page cache over Parquet row groups (see docs/design.md).

``RowGroupCache`` serves ``(file_index, row_group_index)`` keys as dicts of
read-only numpy arrays, with a pluggable residency policy (``POLICIES``:
off, fifo, lru, hot60, plan) and an optional SSD spill tier. ``from_config``
builds one from the ``cache`` config group. ``tcgexp.cache.replay`` replays
a plan's access trace through the policies offline (``python -m
tcgexp.cache.replay``); it is not imported here so it can run as ``-m``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tcgexp.cache.policy import POLICIES, Policy, admit, make_policy
from tcgexp.cache.rowgroup import RowGroupCache
from tcgexp.cache.spill import SpillStore

__all__ = ["POLICIES", "Policy", "RowGroupCache", "SpillStore", "admit", "from_config", "make_policy"]


def from_config(cfg_cache, files: Sequence[str | Path], columns: Iterable[str], spill_dir: str | Path | None,
                name: str, memory_probe: Callable[[], float] | None = None) -> RowGroupCache:
    """A RowGroupCache from a ``CacheConfig`` node (``prefetch_workers`` is the loader's).

    ``spill_dir`` should be a dedicated directory, e.g. ``<run dir>/.cache_spill/train``:
    it is wiped on creation and removed by ``close()``.
    """
    return RowGroupCache(
        files, columns,
        policy=str(cfg_cache.policy),
        capacity=int(cfg_cache.capacity),
        hot_fraction=float(cfg_cache.hot_fraction),
        promotion_hits=int(cfg_cache.promotion_hits),
        high_watermark_pct=float(cfg_cache.high_watermark_pct),
        spill=bool(cfg_cache.spill),
        spill_dir=spill_dir,
        spill_budget_bytes=int(cfg_cache.spill_budget_bytes),
        memory_probe=memory_probe,
        name=name,
        opt_step_guard=str(cfg_cache.opt_step_guard),
    )
