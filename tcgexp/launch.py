"""What a distributed launcher (``mlx.launch``, ``mpirun``) tells each process, read before MLX starts.

Hydra resolves the run dir and the job log's name before ``train()`` runs, so
these live below every package: the config resolvers ``${launch_now:...}``
and ``${rank_suffix:}`` (``tcgexp.config``) and the job-end callback use them.
The one collective here (rank 0's clock to every rank) is a single
``all_sum`` of one float64.
"""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time

# what a launcher sets in every rank's environment (mlx.launch: MLX_RANK; mpirun: OMPI_/PMI_ variables)
LAUNCH_VARS = ("MLX_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
RANK_VARS = ("MLX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")

_LAUNCH_TIME: datetime.datetime | None = None  # per process: when this launch started, by rank 0's clock
_STARTED_BY = os.getppid()  # the process that started this one, as early as tcgexp is imported


def launcher_pid() -> int | None:
    """A rank's launcher (the parent it started with: mlx.launch execs each rank from its own process);
    None outside a launch. Compared with ``os.getppid()`` it says whether the launcher still lives."""
    return _STARTED_BY if launched() else None


def launched() -> bool:
    return any(v in os.environ for v in LAUNCH_VARS)


def keep_exit() -> None:
    """A launched rank's outcome is decided (its run is over, or its error said): from here on a SIGTERM
    is noted, and the process still leaves with its own exit code, within ``KEEP_EXIT_S``.

    Why: when one rank of an ``mlx.launch`` run exits non-zero the launcher SIGTERMs the others at
    once, and on a loaded machine that signal lands in a rank's last milliseconds, after its outcome
    is written and said but before the process has left and written its exit status for
    ``tcgexp-launch``: Python's default would end it there, and the launcher would report a rank that
    exited 1 as one that "left no status (killed?)". A hang in that last tidying still ends: the
    signal arms SIGALRM, whose default action ends the process. Nothing changes outside a launch, off
    the main thread, or where someone else holds SIGTERM (a run's own handler).
    """
    if (
        launched()
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
    ):
        signal.signal(signal.SIGTERM, _exit_kept)


KEEP_EXIT_S = 20  # seconds a launched rank may still take to leave after a SIGTERM once its outcome is decided


def _exit_kept(signum: int, frame) -> None:
    left = signal.alarm(0)  # a later SIGTERM keeps the bound the first one set (never postpones it)
    signal.alarm(left or KEEP_EXIT_S)


def launched_rank() -> int:
    """This process's rank as its launcher set it (0 without one)."""
    for var in RANK_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def rank_suffix() -> str:
    """ "" for rank 0 (and every plain run), ".rank<r>" for the others: their own job logs and status."""
    rank = launched_rank()
    return f".rank{rank}" if rank else ""


def local_ranks() -> int:
    """How many ranks of this launch share this host (1 without a launch): mlx.launch's ring hostfile
    lists every rank's addresses; the ranks whose first address has this rank's IP are local."""
    import json
    from pathlib import Path

    try:
        hosts = json.loads(Path(os.environ["MLX_HOSTFILE"]).read_text())
        ips = [h[0].rsplit(":", 1)[0] for h in hosts]
        return max(1, ips.count(ips[launched_rank()]))
    except (KeyError, OSError, ValueError, IndexError, TypeError, AttributeError):
        return 1


def share_cores() -> None:
    """Ranks on one host split its cores between their BLAS thread pools (unless the user set them):
    two ranks each running MKL on every core fight for them (measured: 5.5k rows/s against 8.1k with
    one thread each on 2 cores). Must run before the BLAS is loaded."""
    n = local_ranks()
    if n > 1:
        threads = str(max(1, (os.cpu_count() or 1) // n))
        for var in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
            os.environ.setdefault(var, threads)


def launch_time() -> datetime.datetime:
    """Now, agreed by every rank of a launch (rank 0's clock): one run dir for all of them.

    Hydra's ``${now:}`` differs between ranks by however long each took to start.
    """
    global _LAUNCH_TIME
    if _LAUNCH_TIME is None:
        now = time.time()
        if launched():
            import mlx.core as mx

            try:
                group = mx.distributed.init()  # the group train() will use: init returns the same one
            except RuntimeError:  # not a real launch: train() says so in one line; the local clock here
                group = None
            if group is not None and group.size() > 1:
                mine = mx.array([now if group.rank() == 0 else 0.0], dtype=mx.float64)
                now = float(mx.distributed.all_sum(mine, group=group, stream=mx.cpu)[0].item())
        _LAUNCH_TIME = datetime.datetime.fromtimestamp(now)
    return _LAUNCH_TIME
