"""Rich progress helpers shared by the entry points: quiet when not on a terminal."""

from __future__ import annotations

import logging
import re
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def stage_progress(console: Console | None = None) -> tuple[Progress, callable]:
    """A Progress plus a ``(stage, done, total)`` callback that opens one bar per stage."""
    console = console or Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    return progress, update


REPORT_LOGGER = "tcgexp.report"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _StdoutAndLog:
    """A file for Rich: text goes to the current ``sys.stdout`` as it is, and each complete line also
    to the ``tcgexp.report`` logger (ANSI styles stripped), which Hydra's job logging for
    ``tcgexp-train`` (``conf/hydra/job_logging/tcgexp.yaml``) sends to ``<run dir>/<job name>.log``.
    Only a handler of that logger's own counts (tests and the data app have none): the root logger's
    console handler would print every line twice."""

    def __init__(self) -> None:
        self._partial = ""
        self._log = logging.getLogger(REPORT_LOGGER)

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        if not self._log.handlers:  # job logging did not wire the logger: printing is all (no echo via root)
            return len(text)
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._log.info(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def report_console() -> Console:
    """Console for report lines: '[data] ...' is literal text, not Rich markup; no wrapping.

    What it prints also reaches the ``tcgexp.report`` logger, line by line (the run's job log).
    """
    return Console(file=_StdoutAndLog(), markup=False, highlight=False, soft_wrap=True)
