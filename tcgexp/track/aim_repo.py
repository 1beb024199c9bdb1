"""The local Aim repo a job tracks into, and how tracking fails without stopping training.

``prepare_repo`` creates the repo once under a file lock with a timeout (parallel jobs of a sweep all
open it at their start); ``open_repo`` opens it with every run indexed (what a script reading a repo
right after a sweep needs); ``quiet_aim`` keeps Aim's INFO lines off the console. Every wait on tracking
is bounded (``within``), and a failure is ``TrackingUnavailable``: one line (``say_untracked``), then the
job trains on untracked.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOCK_SECONDS = 5.0  # the longest a job waits for another's repo initialisation (it takes ~1 s)
INIT_LOCK = ".tcgexp-init.lock"  # in <repo>/.aim/: the lock parallel jobs take to create the repo once


class TrackingUnavailable(Exception):
    """Why there is no tracking for this job: said in one line, then training goes on without it."""


def say_untracked(why: str) -> None:
    """The one line a job prints when tracking fails; training never stops for tracking."""
    print(f"[tracking] {one_line(why)}; training continues without tracking", file=sys.stderr, flush=True)


def one_line(text: str, limit: int = 300) -> str:
    """`text` on one line: an Aim or SQLAlchemy error spans many. SQLAlchemy appends the statement, its
    parameters and a link after the database's own message ("database or disk is full"); they are cut, so
    the limit never cuts the cause instead."""
    text = re.sub(r"\n\[SQL: .*?(?:\n\(Background on this error at: [^)\s]*\)|$)", "", str(text), flags=re.DOTALL)
    text = re.sub(r"\n\(Background on this error at: [^)\s]*\)", "", text)
    flat = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def within(seconds: float, fn: Callable[[], Any]) -> bool:
    """Run `fn` in a daemon thread; True if it returned (or raised) within `seconds`.

    A wait on tracking must never become a wait of training: a stuck call is left
    behind in its thread, which cannot keep the process alive.
    """
    done = threading.Event()

    def target() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001, S110 - the caller only needs "finished or not"
            pass
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name="tcgexp-aim-bounded").start()
    return done.wait(seconds)


def ensure_repo(path: str | Path | None) -> Path | None:
    """The Aim repo at `path`, created if missing; None (said in one line) when it cannot be had.

    Never raises and never waits more than LOCK_SECONDS: the sweep callback calls it
    before any job, and a tracking problem must not stop a sweep.
    """
    try:
        return prepare_repo(path)
    except TrackingUnavailable as exc:
        say_untracked(str(exc))
    except Exception as exc:  # noqa: BLE001
        say_untracked(f"could not open the Aim repo at {path} ({type(exc).__name__}: {exc})")
    return None


def prepare_repo(path: str | Path | None, lock_seconds: float = LOCK_SECONDS) -> Path:
    """Create the Aim repo once, under a file lock taken with a timeout; TrackingUnavailable says why not.

    Parallel jobs of a sweep all start by opening the repo; two that find it
    missing would both initialise it, and one then reads a half-written repo
    ("out of date"). The lock serialises the check-and-create; a lock held for
    longer than an initialisation takes belongs to a stuck process, not to us.
    """
    import fcntl

    import aim

    quiet_aim()
    root = Path(str(path or ".")).expanduser().absolute()
    dot_aim = root / ".aim"
    if dot_aim.exists() and not dot_aim.is_dir():
        raise TrackingUnavailable(f"{dot_aim} is not an Aim repo (a file, not a folder)")
    lock_path = dot_aim / INIT_LOCK  # inside the repo: nothing of ours is left in the user's folder
    try:
        dot_aim.mkdir(parents=True, exist_ok=True)  # Aim initialises an existing, empty .aim as well
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise TrackingUnavailable(f"cannot write the Aim repo at {root} ({exc.strerror or exc})") from exc
    try:
        deadline = time.monotonic() + lock_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TrackingUnavailable(
                        f"{lock_path} has been held by another process for {lock_seconds:.0f} s"
                    ) from None
                time.sleep(0.05)
        if not (dot_aim / "VERSION").exists():
            aim.Repo.from_path(str(root), init=True)
    finally:
        os.close(fd)  # releases the lock
    if not os.access(dot_aim, os.W_OK):  # as root, the mode bits say nothing; a read-only mount does
        raise TrackingUnavailable(f"the Aim repo at {root} is not writable")
    return root


def open_repo(path: str | Path):
    """The Aim repo at `path` with every run indexed, so ``iter_runs()`` sees runs just written.

    Aim indexes runs in the background of ``aim up``/``aim server``; a script reading a
    repo right after a sweep has to index them itself.
    """
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    exit_cleanup_in_place()
    repo = aim.Repo(str(Path(path).expanduser().absolute()))
    manager = RepoIndexManager.get_index_manager(repo)
    for run_hash in repo.list_all_runs():
        manager.index(run_hash)
    return repo


def quiet_aim() -> None:
    """Aim's own INFO lines (``creating RunStatusReporter``, ``starting writer thread``) kept off the
    console and the job logs of the process that opens runs itself (the sweeper marking its trials, the
    sweep callback creating the repo); its warnings and errors still show, and so do our [tracking] lines."""
    import logging

    logging.getLogger("aim").setLevel(logging.WARNING)
    exit_cleanup_in_place()


# CPython 3.12.0-3.12.2 refuse to start a thread once the interpreter is shutting down (cpython#113964, fixed
# in 3.12.3 by cpython#117029), and Aim's exit hook (AutoClean.cleanup) starts one to close its repos and runs:
# every process that opened one printed "Exception ignored in atexit callback ... can't create new thread at
# interpreter shutdown" as it ended
BROKEN_EXIT_THREADS = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 3)


def exit_cleanup_in_place() -> None:
    """On the Pythons of BROKEN_EXIT_THREADS, Aim's exit clean-up runs on the exiting thread: the same body
    (AutoClean._cleanup: every open repo and run closed, in Aim's order) without the thread it starts it in,
    which only shields it from a second Ctrl-C. Elsewhere Aim's own hook stays. Called before any Aim object
    is made in this process (quiet_aim), so Aim never registers its own; once."""
    if not BROKEN_EXIT_THREADS:
        return
    import atexit

    from aim.ext.cleanup import AutoClean

    if getattr(AutoClean, "_tcgexp_in_place", False):
        return
    if AutoClean._registered_with_atexit:  # an Aim object made before us: its hook is registered already
        atexit.unregister(AutoClean.cleanup)
    AutoClean._registered_with_atexit = True  # Aim then registers none of its own
    AutoClean._tcgexp_in_place = True
    atexit.register(AutoClean._cleanup)
