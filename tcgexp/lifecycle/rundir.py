"""Run and sweep folders: tcgexp's only when they carry its marker, and claimed before Hydra writes.

Why: a run pointed at an existing folder of the user's (``hydra.run.dir=~/thesis``) once deleted its
``checkpoints/best/model.pt`` and overwrote its ``result.json``, because a folder that merely *looked*
like a run dir (those names, a ``.hydra/``) was taken for one; and Hydra's ``run_job`` creates the
folder and writes ``.hydra/`` and the job log before the task function runs, so a check inside
``train()`` came too late for ``.hydra/config.yaml``. Now:

- a folder is a tcgexp run dir only if it carries ``.tcgexp-run`` (a sweep dir ``.tcgexp-sweep``),
  written when tcgexp creates or first claims it; a marked folder may be used again (``resume=``
  into it, a SLURM requeue into its own dir);
- a run folder is checked, claimed and locked in one place, :func:`claim`: the refusals below, the
  marker, and the run's lock (``.tcgexp-run.lock``, an flock held for the run's life: a second run
  in the same folder is refused naming the first; the kernel drops it when its run dies). The train
  app's Hydra callback (``run_guard.RunDirGuard``, on by default) claims the folder in
  ``on_run_start``, which Hydra calls after composing and before ``run_job`` creates or writes
  anything, so a refusal, or a second run started at the same moment, leaves it exactly as it was;
  the run then takes that claim over (:func:`claimed`, around the task and ``train()``: the same
  claim, re-entered); ``train()`` called directly claims it there, accepting an unmarked folder only
  while it holds nothing but what Hydra wrote for this job;
- places no run belongs are refused whatever they hold: ``/``, home folders, system trees (``/etc``,
  ``/usr``, ...), the source tree and the launch directory or any folder above them;
- a run that is refused (a config error, a preflight check, a damaged checkpoint, ...) removes what
  its claim and Hydra put there, and the folder (with the empty ones above it) if the claim created
  it, as long as it left no outputs (``Claim.release``): no ``.hydra/`` and empty job log per
  refusal.

The markers, the refused places and the undoing live in ``folders.py``; this module is the claim.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from ..console import in_multirun
from ..errors import ConfigError
from ..overrides import shell_override
from ..ownership import RUN_LOCK, HeldLock, describe, held_by_someone, killed_while, read_info
from .ckpt_files import CheckpointError, check_folder, find
from .folders import RUN_MARKER, SWEEP_MARKER, check, check_job_dirs, discard, mark, previous_run  # noqa: F401 - where callers have found them

LOCK_NAME = RUN_LOCK  # rank 0's (and a plain run's) lock


def lock_name(rank: int) -> str:
    """Rank 0 holds the run dir's own lock (a world-size-1 run is unchanged); rank r its own, in rank 0's folder."""
    return LOCK_NAME if rank == 0 else f".tcgexp-run.rank{rank}.lock"


# -- a run's claim: checked, marked, locked; taken over by the run; undone if the run is refused ----------------


class RunDirBusy(ConfigError):
    """Another live run holds this run folder (a ConfigError: printed as one line by every entry point)."""


def busy(run_dir: Path, holder: dict | None = None, name: str = LOCK_NAME) -> RunDirBusy:
    holder = holder if holder is not None else read_info(Path(run_dir) / name)
    return RunDirBusy(
        f"run dir {run_dir} is in use by another run ({describe(holder)}); give this run its "
        "own folder (hydra.run.dir=...), or wait for that one to end"
    )


class Claim:
    """This process's hold on a run folder: marked ours and locked (``lock_name``) until released."""

    def __init__(self, run_dir: Path, lock: HeldLock, killed: str | None = None) -> None:
        self.run_dir, self.lock = run_dir, lock
        self.killed = killed  # what a run that held this folder before and left no record was (unrecorded_end)
        self.owner: int | None = None  # the thread whose run took the claim over (claimed)
        self.phase: str | None = None  # what the run last said it was doing (note)
        self.depth = 0

    def note(self, phase: str) -> None:
        """Say in the lock file what the run is doing now (``unrecorded_end`` names it to the next holder, should
        the run die where it writes no record: a signal while it loads a library, a crash in native code)."""
        self.phase = phase
        try:
            self.lock.path.write_text(json.dumps({**read_info(self.lock.path), "phase": phase}))
        except OSError:
            pass

    def release(self, *, refused: bool) -> None:
        """Unlock; a run refused before it left an output then undoes the claim (``discard``), unless it is a
        sweep's job, whose folder holds the job's error for the sweep report."""
        _HELD.pop(self.run_dir, None)
        try:  # this run ended with a record (or a refusal): the next holder must not take it for killed
            self.lock.path.write_text(json.dumps({**read_info(self.lock.path), "ended": True}))
        except OSError:
            pass
        self.lock.release()  # first: discard leaves a folder whose lock someone holds
        if refused and not in_multirun():
            discard(self.run_dir)


# the run folders this process holds, by absolute path: the callback's claim, until its run takes it over
_HELD: dict[Path, Claim] = {}


def run_dir_of(resume) -> Path | None:
    """The run folder a ``resume=`` continues (a run dir, or a checkpoint inside its checkpoints/), or None."""
    if not resume:
        return None
    path = Path(str(resume)).expanduser().absolute()
    return path.parent.parent if path.parent.name == "checkpoints" else path


def unrecorded_end(run_dir: Path, holder: dict) -> str | None:
    """The run that held `run_dir`'s lock before (`holder`, as its lock file says) when it ended with no record:
    result.json missing or older than that run's start. Only a signal that ends the process where it stands
    (SIGKILL, the kernel's OOM killer, a crash in native code: SIGBUS, SIGSEGV) or a lost machine end a run so
    (every other ending writes result.json); the kernel dropped its lock. The run's last noted phase says
    where it was."""
    started = holder.get("started")
    if not started or holder.get("ended") or holder.get("host") != socket.gethostname():
        return None
    result = run_dir / "result.json"
    try:
        import datetime as dt

        began = dt.datetime.fromisoformat(started).timestamp()
        if result.is_file() and result.stat().st_mtime >= began - 1:
            return None
    except (OSError, ValueError):
        return None
    return f"the run that held {run_dir} before ({describe(holder)}) {killed_while(holder)}"


def claim(run_dir: Path, *, rank: int = 0, hydra_made: bool = True, continues: Path | None = None) -> Claim:
    """The one place a run folder is checked, claimed and locked; the claim this process holds already, if any.

    `hydra_made`: an unmarked folder holding only Hydra's files for this job is accepted (``train()``, after
    ``run_job``); the Hydra callback claims before Hydra writes, so it accepts nothing there. `continues`: the
    run folder this run continues (``resume=``, a SLURM requeue of the folder's own job); a folder holding
    the result or checkpoints of any other run is refused rather than overwritten.
    """
    run_dir, name = Path(run_dir).expanduser().absolute(), lock_name(rank)
    if run_dir in _HELD:
        return _HELD[run_dir]
    if held_by_someone(run_dir / name):  # a live run's folder: refused before anything is written
        raise busy(run_dir, name=name)
    check(run_dir, hydra_made=hydra_made)
    same_run = continues is not None and Path(continues).resolve() == run_dir.resolve()
    if not same_run and (left := previous_run(run_dir)):
        raise ConfigError(
            f"hydra.run.dir={run_dir} holds another run's {left}, which this run would replace: "
            f"continue that run with {shell_override('resume', str(run_dir))}, or give this run its own folder "
            "(hydra.run.dir=...)"
        )
    check_folder(run_dir / "checkpoints")  # checkpoint folders it would replace hold only checkpoints
    mark(run_dir, hydra_made=hydra_made)
    before = read_info(run_dir / name)  # who held it last (the lock file keeps its last holder's info)
    lock = HeldLock(run_dir / name, "run")
    try:
        holder = lock.acquire()
    except OSError as exc:  # a read-only or foreign folder: say which, before any work
        raise ConfigError(
            f"run dir {run_dir} cannot be written ({exc.strerror or exc}); point hydra.run.dir "
            "(or run_dir=) at a folder you can write"
        ) from exc
    if holder is not None:  # another run started on this folder at the same moment and locked it first
        raise busy(run_dir, holder, name)
    _HELD[run_dir] = Claim(run_dir, lock, unrecorded_end(run_dir, before) if before and rank == 0 else None)
    return _HELD[run_dir]


@contextlib.contextmanager
def claimed(run_dir: Path, *, rank: int = 0, continues: Path | None = None) -> Iterator[Claim]:
    """Around a run: its folder's claim (the Hydra callback's, taken over, or made now), re-entered by the
    same run (the task, then ``train()`` inside it); a second run of this process on the folder is
    refused as busy. When the run that took it over ends, the claim is released, and undone if the
    run was refused before it wrote an output."""
    held = claim(run_dir, rank=rank, continues=continues)
    if held.owner not in (None, threading.get_ident()):
        raise busy(held.run_dir, name=lock_name(rank))
    held.owner, held.depth = threading.get_ident(), held.depth + 1
    try:
        yield held
    except BaseException:
        held.depth -= 1
        if not held.depth:
            held.release(refused=True)
        raise
    held.depth -= 1
    if not held.depth:
        held.release(refused=False)


def requeued_resume(run_dir: Path) -> str | None:
    """The run dir to continue when this job is a SLURM requeue of itself, else None.

    SLURM restarts a requeued job (``scontrol requeue``, preemption with ``PreemptMode=REQUEUE``,
    submitit's SIGUSR2 requeue before the time limit) with the same command and
    ``SLURM_RESTART_COUNT`` >= 1, so its Hydra job lands in the same run dir: there, the run's own
    ``latest/`` is where to go on, not step 0. Anything else (a first start, a run dir with no
    checkpoint yet) starts fresh.
    """
    count = os.environ.get("SLURM_RESTART_COUNT", "")
    if not count.isdigit() or int(count) < 1:
        return None
    try:
        find(str(run_dir))
    except CheckpointError:
        return None
    return str(run_dir)
