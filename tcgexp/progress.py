"""Rich progress helpers shared by the entry points: quiet when not on a terminal."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def stage_progress(console: Console | None = None) -> tuple[Progress, "callable"]:
    """A Progress plus a ``(stage, done, total)`` callback that opens one bar per stage."""
    console = console or Console(stderr=True)
    progress = Progress(TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=not console.is_terminal)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    return progress, update


def report_console() -> Console:
    """Console for report lines: '[data] ...' is literal text, not Rich markup; no wrapping."""
    return Console(markup=False, highlight=False, soft_wrap=True)
