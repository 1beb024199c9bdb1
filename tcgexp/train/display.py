"""Phase-aware Rich progress: one bar whose total comes from the real plan of each phase.

Phases: train epoch N, validation, metric aggregation, checkpointing, done.
The bar is reset (new total, zero) at each phase, so 100 % always means the
phase shown is complete. Quiet when stderr is not a terminal.
"""

from __future__ import annotations

import time
from typing import Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunDisplay:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description:<18}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self.task = self.progress.add_task("starting", total=1, status="")
        self.fields: dict[str, float] = {}
        self._rows0, self._t0 = 0, time.perf_counter()

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.phase("done", 1)
        self.progress.update(self.task, completed=1)
        self.progress.stop()

    def phase(self, name: str, total: int) -> None:
        self.progress.reset(self.task, total=max(total, 1), description=name, status=self.status())

    def advance(self, n: int, fields: dict) -> None:
        self.fields.update(fields)
        if self.progress.disable:  # not a terminal: nothing is drawn, the count is all that is kept
            self.progress.update(self.task, advance=n)
            return
        self.progress.update(self.task, advance=n, status=self.status())

    def rows(self, rows_total: int) -> None:
        now = time.perf_counter()
        if now - self._t0 > 0.5:
            self.fields["rows/s"] = (rows_total - self._rows0) / (now - self._t0)
            self._rows0, self._t0 = rows_total, now

    def status(self) -> str:
        f = self.fields
        parts = []
        if "rows/s" in f:
            parts.append(f"{f['rows/s']:,.0f} rows/s")
        if "loss" in f:
            parts.append(f"loss {f['loss']:.4f}")
        if "lr" in f:
            parts.append(f"lr {f['lr']:.2e}")
        if "hit" in f:
            parts.append(f"cache hit {f['hit']:.1f}%")
        return "  ".join(parts)
