"""A SIGTERM during a corpus build (``python -m tcgexp.data``, a demo day's self-play, its import, a day's encode):
one line saying where it stopped, what is kept and the command that continues, then exit 143 (128 + the signal).

Python's default would end the process at once, with no line of tcgexp's own (only the resource tracker's
"leaked semaphore objects" warning for the worker pool it left). Here the signal raises ``BuildStopped`` in the
main thread; on the way out each stage's own cleanup runs (the worker pools cancel the work they had queued, an
import abandons its unfinished ZIP, the build lock is released), and ``stop_said`` prints the line. Only where
nobody else holds SIGTERM: a training run's ``StopSignals`` keeps its own handling of the build it runs.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class BuildStopped(BaseException):
    """Raised from the SIGTERM handler: the build leaves (a BaseException, so no ``except Exception`` holds it)."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)  # its one argument: it pickles (a joblib worker hands it back) as it was made
        self.signame = signame

    def __str__(self) -> str:
        return f"stopped by {self.signame}"


def _stop(signum, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM during the cleanup ends the process at once
    raise BuildStopped(signal.Signals(signum).name)


def _where(stage: str | None, demo: bool) -> str:
    """A progress stage as said: ``2026-07-27 self-play`` -> ``the demo day 2026-07-27's self-play``."""
    day, _, what = (stage or "").partition(" ")
    if len(day) == 10 and day[4] == day[7] == "-" and what:
        return f"{'the demo day' if demo else 'day'} {day}'s {what}"
    return f"the build's {stage}" if stage else "the build's start"


def _kept(corpus) -> str:
    built = [d for d in corpus.dates if corpus.paths(d).manifest.exists()]
    return f"the days built so far are kept ({len(built)} of {len(corpus.dates)}), the one in progress starts again"


@contextmanager
def stop_said(corpus, progress: Callable[[str, int, int], None] | None) -> Iterator[Callable[[str, int, int], None]]:
    """Around `corpus`'s build: yields the progress callback to build with (`progress`, noting each stage); on
    SIGTERM, ``[data] stopped by SIGTERM during <the stage>: <what is kept>; run the same command again to
    continue`` on stderr, then ``SystemExit(143)``. Nothing is installed off the main thread or where SIGTERM
    already has someone else's handler."""
    at: list[str] = []

    def noted(stage: str, done: int, total: int) -> None:
        at[:] = [stage]
        if progress is not None:
            progress(stage, done, total)

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) not in (
        signal.SIG_DFL,
        None,
    ):
        yield progress
        return
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        yield noted
    except BuildStopped as stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the line is said whole
        where = _where(at[0] if at else None, bool((corpus.demo or {}).get("episodes_per_day")))
        line = (
            f"[data] stopped by {stop.signame} during {where}: {_kept(corpus)}; run the same command again to continue"
        )
        print(line, file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.Signals[stop.signame].value) from None
    finally:
        signal.signal(signal.SIGTERM, before)
