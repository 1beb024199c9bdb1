"""The row-group cache: a page cache over Parquet row groups (see docs/design.md).

``RowGroupCache`` serves ``(file_index, row_group_index)`` keys as dicts of
read-only numpy arrays, with a pluggable residency policy (``policy.py``: off,
fifo, lru, hot60, plan; each a ``cache`` config option that names its class)
and an optional SSD spill tier (what stays in RAM and what moves to the spill:
``residency.py``). Decoding lives below, in ``tcgexp.data.source``.
"""

from __future__ import annotations

from tcgexp.cache.policy import Policy, admit
from tcgexp.cache.rowgroup import RowGroupCache
from tcgexp.cache.spill import SpillStore

__all__ = ["Policy", "RowGroupCache", "SpillStore", "admit"]
