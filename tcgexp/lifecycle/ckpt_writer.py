"""Checkpoints written by a thread of their own, in the order they were taken, while training goes on.

A checkpoint is taken at a step (``checkpoint.snapshot``: the evaluated weights and optimizer state, which
MLX never changes in place, the lanes' rows and state.json's text) on the training thread; writing it
(safetensors, checksums, fsync, the renames) is files and the disk, done here while the next steps run.
Every guarantee of ``checkpoint.save`` holds, as the same code writes the same bytes: sealed, whole or
refused, ``latest/`` replaced atomically; writes keep their order (one thread, first in first out). A
failure is kept and raised on the training thread at its next step boundary (``check``), the same
one-line error; the writes after it are not made. ``drain`` waits for every write: before an epoch's
validation (a failed write ends the epoch as the synchronous one did), at the end of the run and at
every stop, bounded by the caller's ``abandon`` (a stopping signal's grace: ``signals.STOP_GRACE_S``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

POLL_S = 0.05  # how often a wait asks `abandon` whether to go on (a signal handler runs between)
DEPTH = 2  # snapshots taken and not yet written, at most: a slow disk holds the training thread, not memory


class CheckpointWriter:
    def __init__(self, depth: int = DEPTH) -> None:
        self.depth = depth
        self._cv = threading.Condition()
        self._jobs: deque[Callable[[], None]] = deque()
        self._busy = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # the first failed write's
        self.wait_seconds = 0.0  # the training thread's time waiting for writes (a full queue, drains)

    def submit(self, job: Callable[[], None], abandon: Callable[[], BaseException | None] | None = None) -> None:
        """Queue `job` (a snapshot's write) after the ones before it; waits while `depth` are queued."""
        self.check()
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="tcgexp-ckpt-writer")
                self._thread.start()
            self._wait(lambda: len(self._jobs) + self._busy < self.depth, abandon)
            self._jobs.append(job)
            self._cv.notify_all()

    def check(self) -> None:
        """Raise the failed write's error, if one failed (the training thread, at a step boundary)."""
        if self.error is not None:
            raise self.error

    def drain(self, abandon: Callable[[], BaseException | None] | None = None) -> None:
        """Wait until every queued write is on disk, then ``check``. `abandon`, asked every POLL_S while
        waiting: an exception it returns ends the wait (raised); the write in flight goes on."""
        with self._cv:
            self._wait(lambda: not self._jobs and not self._busy, abandon)
        self.check()

    @property
    def idle(self) -> bool:
        with self._cv:
            return not self._jobs and not self._busy

    def _wait(self, ready: Callable[[], bool], abandon) -> None:
        """(under the lock) until `ready()`; the lock is released while waiting."""
        if ready():
            return
        t0 = time.perf_counter()
        try:
            while not ready():
                if self._thread is None or not self._thread.is_alive():  # (cannot happen: the thread never ends)
                    raise RuntimeError("the checkpoint writer thread is gone")
                self._cv.wait(POLL_S)
                stop = abandon() if abandon is not None else None
                if stop is not None and not ready():
                    raise stop
        finally:
            self.wait_seconds += time.perf_counter() - t0

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs:
                    self._cv.wait()
                job = self._jobs.popleft()
                self._busy = True
            try:
                if self.error is None:  # after a failure nothing newer is written over what is kept
                    job()
            except BaseException as exc:  # noqa: BLE001 - raised on the training thread (check)
                self.error = exc
            finally:
                job = None  # the snapshot goes now, not when the next one comes
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
