"""The memory-pressure probe the cache consults on every access."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import psutil


class MemoryProbe:
    """psutil's system memory percent, read at most every `interval` seconds.

    A psutil read costs ~35-45 us (it parses /proc/meminfo), more than a cache hit
    itself, and it runs on the loader's thread beside the step: at 5 ms it was read
    on most of a warm epoch's ~670 gets (0.03 s of a 2-core epoch's CPU). Memory
    pressure does not change on that scale (filling 1 GiB takes the loader seconds
    of decoding), so a reading up to 25 ms old is as good and keeps hits cheap.
    """

    def __init__(self, interval: float = 0.025) -> None:
        self.interval = interval
        self._at = -1.0
        self._pct = 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        if now - self._at >= self.interval:
            self._pct, self._at = psutil.virtual_memory().percent, now
        return self._pct


class Pressure:
    """Whether memory is above the cache's high watermark, by `probe` (a percent).

    A probe that raises must not stop training: it is warned about once and read as
    "no pressure". ``pct`` is the last reading (the cache's ``memory_pct`` counter).
    """

    def __init__(self, probe: Callable[[], float] | None, high_watermark_pct: float, name: str) -> None:
        self.probe = probe or MemoryProbe()
        self.high_watermark_pct = float(high_watermark_pct)
        self.name, self.pct, self._failed = name, 0.0, False

    def __call__(self) -> bool:
        try:
            pct = float(self.probe())
        except Exception as exc:  # noqa: BLE001
            if not self._failed:
                self._failed = True
                warnings.warn(
                    f"cache-{self.name}: memory probe failed ({exc}); assuming no pressure",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return False
        self.pct = pct
        return pct > self.high_watermark_pct
