"""The memory-pressure probe the cache consults on every access."""
from __future__ import annotations

import time

import psutil


class MemoryProbe:
    """psutil's system memory percent, read at most every `interval` seconds.

    A psutil read costs ~35 us (it parses /proc/meminfo), more than a cache hit
    itself; memory pressure does not change on a microsecond scale, so a
    reading a few milliseconds old is as good and keeps hits cheap.
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self._at = -1.0
        self._pct = 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        if now - self._at >= self.interval:
            self._pct, self._at = psutil.virtual_memory().percent, now
        return self._pct
