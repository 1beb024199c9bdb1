"""Aim tracking for one job: hparams = the resolved config; metrics by name prefix.

``train/*``, ``lr`` and ``cache_train/*`` at the trainer's cadence (``trainer.track_every``), in Aim context
``{"subset": "train"}``; ``val/*`` and ``cache_val/*`` each validation, in
``{"subset": "val"}`` (so the UI can group by subset). The run is named after
what sets the job apart (``cache=plan tbptt.chunk=32``) and ``run["swept"]``
holds those values as a dict (the runs table's columns); ``run["overrides"]``,
``run["sweep"]`` and ``run["job_num"]`` let the UI group and filter a sweep,
whose jobs share an Aim experiment named after it. ``run["status"]`` is
"running", then "completed", "stopped" or "failed" (with ``run["error"]`` and
tag "failed"). A resumed job continues the same Aim run (its hash travels in
the checkpoint), under the same name and experiment (``open_run``).
Either way the run lives in a child process (``remote.py``): ``tracking=aim``
gives it the local repo and a lower priority, ``tracking=aim_remote`` a server.

Built by Hydra (``conf/tracking/aim.yaml``):
``build(cfg.tracking)(hparams=..., context=..., resume_hash=...)``.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

from ..schema import schema
from . import TrackingConfig
from .aim_record import (  # noqa: F401 (callers open and mark runs through this module too)
    CLOSE_SECONDS,
    IDENTITY,
    OPEN_SECONDS,
    RECORD_LOCK,
    RUN_RECORD,
    SUBSETS,
    _after,
    apply_attributes,
    by_context,
    discard_run,
    experiment_name,
    mark_run,
    open_run,
    recorded_run,
    run_attributes,
    run_record,
    subset_of,
    track_after,
)
from .aim_repo import say_untracked
from .context import JobContext

# in the job's run dir: which Aim run it writes, written by the run's own process as soon as the run is open, so a
# resume finds it even when the job died before it learnt the hash (no checkpoint waits for the hash)


@schema("tracking", "aim")
class AimTrackingConfig(TrackingConfig):
    repo: str | None = "."  # the folder holding .aim/ (what `aim up --repo` takes)
    # keep the Aim process for the next run this process tracks (its import and start-up paid once): null = in a
    # sweep (its jobs in one process); a daily sequence sets it for its phases
    keep_process: bool | None = None
    NULLABLE: ClassVar[tuple] = ("experiment", "keep_process")


class AimTracker:
    """One Aim run, written by a child process of its own (``python -m tcgexp.track.remote``).

    The training process only queues JSON lines: importing Aim, creating the repo under its lock,
    opening the run and every ``Run.track`` happen in the child, at lower priority (``NICE``), so
    they take neither the training's cores first nor its interpreter lock (a thread did: the step
    waited on Aim's Python between microbatches). The job does not wait for the run to open; the
    lines queue meanwhile. Nothing is dropped: ``close`` waits (at most OPEN_SECONDS +
    CLOSE_SECONDS) for the child to write every line and close the run. ``hash`` waits for the run
    to open. A tracking failure, at any point, costs tracking only (one line, ``say_untracked``).
    """

    NICE = 10
    CHILD = ("-m", "tcgexp.track.remote")  # the process that writes the run (its arguments to this Python)
    REASON_SECONDS = 2.0  # how long a lost pipe waits for the child's own reason (the line it wrote before exiting)

    def __init__(
        self,
        *,
        repo: str | None,
        experiment: str | None,
        hparams: dict,
        context: JobContext,
        keep_process: bool | None,
        resume_hash: str | None = None,
    ) -> None:
        self.where = str(Path(str(repo or ".")).expanduser().absolute())
        self._hash: str | None = None
        self._opened, self._failed = threading.Event(), False
        self._drained = threading.Event()  # the child's replies read to their end (it has exited)
        self._lines: queue.SimpleQueue = queue.SimpleQueue()
        self._closing = False  # its last line (close) is queued
        self.proc: subprocess.Popen | None = None  # None once closed
        self._proc: subprocess.Popen | None = None
        self._closed = threading.Event()  # the child closed the run and waits for the next job's (``reuse``)
        # the next run in this process takes the child on: a sweep's next job, a sequence's next phase
        self.reuse = bool(context.in_sweep) if keep_process is None else bool(keep_process)
        init = {
            "repo": self.where,
            "experiment": experiment_name(experiment, context),
            "resume_hash": resume_hash,
            "attrs": run_attributes(hparams, context),
            "nice": self.NICE,
            "record": run_record(context),
            "reuse": self.reuse,
        }
        line = json.dumps(init, default=str) + "\n"
        try:
            self.proc = self._proc = self._spare(line) if self.reuse else None
            if self.proc is None:
                self.proc = self._proc = start_child(line, self.CHILD)
        except Exception as exc:  # noqa: BLE001 - any tracking failure must leave training running
            self._give_up(f"could not start an Aim run at {self.where} ({type(exc).__name__}: {exc})")
            return
        threading.Thread(target=self._read, args=(self.proc,), daemon=True, name="tcgexp-aim-reply").start()
        self._writer = threading.Thread(target=self._write, args=(self.proc,), daemon=True, name="tcgexp-aim-lines")
        self._writer.start()

    @staticmethod
    def _spare(line: str) -> subprocess.Popen | None:
        """The Aim process an earlier job of this sweep (in this process) closed its run in, given `line` (this
        run's init), or None: there is none, or it is gone."""
        while _SPARE:
            owner, proc = _SPARE.pop()
            if owner != os.getpid() or proc.poll() is not None:  # (a forked worker's copy is not ours to use)
                continue
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except (OSError, ValueError):
                continue
            return proc
        return None

    @property
    def hash(self) -> str | None:
        if not self._opened.wait(OPEN_SECONDS):  # asked at every checkpoint: a silent child costs this once
            self._give_up(f"could not start an Aim run at {self.where} (no answer in {OPEN_SECONDS:.0f} s)")
        return self._hash

    def _read(self, proc: subprocess.Popen) -> None:
        """The child's replies: {"imported"}, then {"hash"} or why not."""
        try:
            for line in proc.stdout:
                reply = json.loads(line)
                if "hash" in reply:
                    self._hash = reply["hash"]
                    break
                if "unavailable" in reply or "error" in reply:
                    why = reply.get("unavailable") or f"could not start an Aim run at {self.where} ({reply['error']})"
                    self._give_up(why)
                    break
            else:
                self._give_up(f"could not start an Aim run at {self.where} (its process ended)")
        except Exception as exc:  # noqa: BLE001
            self._give_up(f"could not start an Aim run at {self.where} ({type(exc).__name__}: {exc})")
        finally:
            self._opened.set()
        try:
            for line in proc.stdout:  # drained to its end (a full pipe would stall the child), a failure said
                if '"lost"' in line:
                    self._give_up(f"lost the Aim run at {self.where} ({json.loads(line)['lost']})")
                if '"closed"' in line:  # the run is closed, the process waits for the next job's run: not ours
                    self._closed.set()
                    break
        except (OSError, ValueError):
            pass
        finally:
            self._drained.set()

    def _write(self, proc: subprocess.Popen) -> None:
        while True:
            line = self._lines.get()
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except (OSError, ValueError):
                # the child exits right after saying why (a full disk: its "lost" line); that line may still be
                # on its way to the reader when this write finds the pipe closed: wait for it, so the one line
                # says the cause rather than "its process ended"
                self._drained.wait(self.REASON_SECONDS)
                if not self._failed:
                    self._give_up(f"lost the Aim run at {self.where} (its process ended)")
                return
            if line is _CLOSE:
                return

    def _give_up(self, why: str) -> None:
        if self._failed:
            return
        self._failed, self._hash = True, None
        self._opened.set()  # nothing will open now: whoever waits for the hash has its answer (None)
        say_untracked(why)
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _send(self, msg: dict) -> None:
        if not self._failed and self.proc is not None:
            self._lines.put(json.dumps(msg, default=float) + "\n")

    def track(
        self, values: dict[str, float], *, step: int, epoch: int | None = None, context: dict | None = None
    ) -> None:
        self._send({"values": values, "step": step, "epoch": epoch, "context": context})  # (floats: _send, the child)

    def finish(self, status: str) -> None:
        self._send({"attrs": {"status": status, "error": None}, "untag": "failed"})  # a resumed run failed before

    def fail(self, reason: str) -> None:
        """Visible in the UI as such: run["status"] = "failed", the reason in run["error"], tag "failed"."""
        self._send({"attrs": {"status": "failed", "error": reason}, "tag": "failed"})

    def begin_close(self) -> None:
        """The run's last lines are queued: its process writes them and closes the run while the job tears
        down; ``close`` then waits for it (bounded)."""
        if self.proc is not None and not self._failed and not self._closing:
            self._closing = True
            self._lines.put(_CLOSE)

    def close(self, within: float | None = None) -> None:
        """Wait for the child to write every line and close the run: CLOSE_SECONDS (and OPEN_SECONDS more while
        it is still opening), or `within` seconds if less (a run stopping for a signal has a budget). In a sweep
        the child then waits for the next job's run in this process (``reuse``)."""
        self.begin_close()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        bound = CLOSE_SECONDS + (0 if self._failed or self._opened.is_set() else OPEN_SECONDS)
        bound = min(bound, within) if within is not None else bound
        deadline = time.monotonic() + bound
        try:
            while not self._closed.is_set():
                if proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(proc.args, bound)
                self._closed.wait(0.02)
        except subprocess.TimeoutExpired:
            print(
                f"[tracking] the Aim run at {self.where} did not finish writing in {bound:.0f} s; left unflushed",
                file=sys.stderr,
                flush=True,
            )
            proc.kill()
            proc.wait()
        if self._closed.is_set() and not self._failed and proc.poll() is None:
            self._proc = None  # the next job's now: nothing of this run may kill it
            _SPARE.append((os.getpid(), proc))
            _let_go_at_exit()
        self._opened.wait(OPEN_SECONDS)  # the child is gone, its replies read at once: a failure to open is said by now


# an Aim process whose run closed, waiting for the next job of the sweep in this process: (owner pid, process)
_SPARE: list[tuple[int, subprocess.Popen]] = []
_AT_EXIT: list[bool] = []


def start_child(line: str, child: tuple = ()) -> subprocess.Popen:
    """An Aim process (`child`: its arguments to this Python, ``AimTracker.CHILD`` by default: ``python -m
    tcgexp.track.remote``) given its first line. A session of its own: Ctrl-C (the terminal's foreground group)
    never reaches it, not even while it starts, before it ignores signals (remote.child): the job says when it
    closes."""
    proc = subprocess.Popen(
        [sys.executable, *(child or AimTracker.CHILD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    proc.stdin.write(line)
    proc.stdin.flush()
    return proc


def prewarm() -> None:
    """An Aim process started ahead of the first run this process will track, importing Aim meanwhile: the spare
    the next ``AimTracker`` that may take one (``keep_process``) takes. A daily sequence starts one before its first
    phase, so no phase waits for Aim's import. A failure costs nothing but the head start."""
    try:
        proc = start_child(json.dumps({"prewarm": True}) + "\n")
    except OSError:
        return
    _SPARE.append((os.getpid(), proc))
    _let_go_at_exit()


def let_go() -> None:
    """Every spare Aim process of this process told to end (its stdin closed): none has a run open. At exit, and
    where a caller is done tracking before it (a daily sequence, once its series is written)."""
    while _SPARE:
        owner, proc = _SPARE.pop()
        if owner == os.getpid():
            try:
                proc.stdin.close()
            except OSError:
                pass


def _let_go_at_exit() -> None:
    """At this process's exit a spare Aim process is told to end (its stdin closed): it has no run open."""
    if _AT_EXIT:
        return
    _AT_EXIT.append(True)
    atexit.register(let_go)


_CLOSE = json.dumps({"close": True}) + "\n"
