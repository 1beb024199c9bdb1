"""A rank stops when the launcher that started it dies (``mlx.launch`` SIGTERMed or SIGKILLed).

Why: MLX 0.32's launcher neither forwards a signal to its ranks nor takes them with it, so killing it
(SIGTERM, SIGKILL: a ``timeout``, a closed terminal, a job scheduler) left every rank training on as
an orphan. Each rank asks the kernel for a signal when the process that started it exits
(``PR_SET_PDEATHSIG``, as the corpus build's workers do, ``tcgexp.data.parallel``; a SIGKILL of the
launcher cannot be trapped by the launcher, but this is delivered to the rank); a launcher that died
before the rank asked is caught by comparing the parent pid with the one the rank started with.

What the rank does then (``launcher_gone``): its stdout and stderr were pipes to the launcher, now
broken (a print would raise BrokenPipeError), so they go to the rank's job log; the run stops as for
a SIGHUP (the launcher hung up): at its next safe point, every rank at the same step (all were told at
once, and the ranks agree through the next all-reduce), ``latest/`` and ``result.json``
(``interrupted``) written, exit 129. A rank that is not out within ``GRACE_S`` (inside a long corpus
build, or with nothing to stop) exits at once; its spill is reclaimed by the next run
(``tcgexp.cache.registry``). The signal is one of its own (a real-time signal), so a run already
stopping for a SIGTERM that reached every process (SLURM) takes the launcher's death as no second one.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

from ..launch import launcher_pid
from .signals import StopSignals

PR_SET_PDEATHSIG = 1
WATCH_SIGNAL = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else None  # (glibc keeps the first few)
STOP_AS = "SIGHUP"  # what the run records: its launcher hung up
GRACE_S = 20.0

_state = {"watching": False, "gone": False}


def watch_launcher(rank: int) -> None:
    """From the main thread of a rank, once it knows it is one (``World.init``); idempotent."""
    if _state["watching"] or WATCH_SIGNAL is None or not sys.platform.startswith("linux"):
        return
    _state["watching"] = True
    signal.signal(WATCH_SIGNAL, lambda signum, frame: launcher_gone(rank))
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(WATCH_SIGNAL))
    except OSError:
        pass
    started_by = launcher_pid()
    if started_by is not None and os.getppid() != started_by:  # it died before we asked: nobody will tell us
        launcher_gone(rank)


def job_log() -> str:
    """This process's job log (Hydra's FileHandler on the root logger), else /dev/null."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return handler.baseFilename
    return os.devnull


def launcher_gone(rank: int) -> None:
    """The launcher is dead: output to the job log, then stop the run (or the process) within GRACE_S."""
    if _state["gone"]:
        return
    _state["gone"] = True
    try:  # raw descriptors: the main thread may be inside a print to these very streams
        fd = os.open(job_log(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.write(
            2,
            (
                f"[distributed] rank {rank}: the launcher (pid {launcher_pid()}) is gone; this rank stops at "
                f"the next safe point (at most {GRACE_S:.0f} s), as for a {STOP_AS}\n"
            ).encode(),
        )
    except OSError:
        pass
    run = StopSignals.active
    if run is None:  # nothing of a run to save: leave now
        os._exit(128 + int(getattr(signal, STOP_AS)))
    run.request(STOP_AS)
    threading.Thread(target=_deadline, name="tcgexp-launcher-gone", daemon=True).start()


def _deadline() -> None:
    time.sleep(GRACE_S)
    os._exit(128 + int(getattr(signal, STOP_AS)))
