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
import traceback
from pathlib import Path
from typing import Any

from ..ownership import held_by_someone
from ..schema import schema
from . import TrackingConfig
from .aim_repo import exit_cleanup_in_place, one_line, quiet_aim, say_untracked, within
from .context import JobContext

CLOSE_SECONDS = 10.0  # the longest a job waits for its run to close (a flush to local disk)
OPEN_SECONDS = 30.0  # the longest anything waits for the run to open (import, repo lock, remote handshake)
# in the job's run dir: which Aim run it writes, written by the run's own process as soon as the run is open, so a
# resume finds it even when the job died before it learnt the hash (no checkpoint waits for the hash)
RUN_RECORD = ".tcgexp-aim-run.json"
RECORD_LOCK = ".tcgexp-aim-run.lock"  # held by the run's process for its life: a resume waits for it to finish

SUBSETS = (
    ("train/", "train"),
    ("cache_train/", "train"),
    ("lr", "train"),
    ("val/", "val"),
    ("cache_val/", "val"),
    ("eval/", "eval"),  # the policy playing the real game (tcgexp.train.evaluate)
)


@schema("tracking", "aim")
class AimTrackingConfig(TrackingConfig):
    repo: str | None = "."  # the folder holding .aim/ (what `aim up --repo` takes)


def subset_of(name: str) -> str | None:
    """The Aim context subset of a metric name: "train", "val", or None (no context)."""
    for prefix, subset in SUBSETS:
        if name == prefix or (prefix.endswith("/") and name.startswith(prefix)):
            return subset
    return None


def by_context(values: dict[str, float], extra: dict | None = None) -> list[tuple[dict, dict[str, float]]]:
    """`values` split into (context, values) groups: one Aim ``track`` call each. `extra` joins every
    group's context (``{"rank": r}``: one rank's own counters in a distributed run)."""
    groups: dict[str | None, dict[str, float]] = {}
    for name, value in values.items():
        groups.setdefault(subset_of(name), {})[name] = float(value)
    return [({**({"subset": subset} if subset else {}), **(extra or {})}, group) for subset, group in groups.items()]


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
        self.reuse = bool(context.in_sweep)  # a sweep's next job in this process takes the child on
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
            # a session of its own: Ctrl-C (the terminal's foreground group) never reaches it, not even while it
            # starts, before it ignores signals (remote.child): the job says when it closes
            self.proc = self._proc = self._spare(line) if self.reuse else None
            if self.proc is None:
                self.proc = self._proc = subprocess.Popen(
                    [sys.executable, *self.CHILD],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    bufsize=1,
                    start_new_session=True,
                )
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
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


def _let_go_at_exit() -> None:
    """At this process's exit a spare Aim process is told to end (its stdin closed): it has no run open."""
    if _AT_EXIT:
        return
    _AT_EXIT.append(True)

    def let_go() -> None:
        while _SPARE:
            owner, proc = _SPARE.pop()
            if owner == os.getpid():
                try:
                    proc.stdin.close()
                except OSError:
                    pass

    atexit.register(let_go)


_CLOSE = json.dumps({"close": True}) + "\n"


def run_record(context: JobContext) -> str | None:
    """Where the job's tracker records its run (None outside a run folder)."""
    return str(Path(context.run_dir) / RUN_RECORD) if context.run_dir else None


def recorded_run(run_dir: Path, wait: float = 0.0) -> str | None:
    """The hash of the Aim run a job in `run_dir` wrote (its record), or None. `wait`: while that run's process
    still lives (a job SIGKILLed as its tracker started: the process opens the run and writes what it was
    sent), wait for it to end, at most `wait` seconds, so a resume continues that run and never races it."""

    deadline = time.monotonic() + wait
    while held_by_someone(Path(run_dir) / RECORD_LOCK) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        return json.loads((Path(run_dir) / RUN_RECORD).read_text()).get("hash")
    except (OSError, ValueError, AttributeError):
        return None


def run_attributes(hparams: dict, context: JobContext) -> dict[str, Any]:
    """What a job's Aim run records beside its metrics: its name, config, overrides, sweep membership."""
    attrs: dict[str, Any] = {
        "name": context.name,
        "hparams": hparams,
        "overrides": list(context.overrides),
        "swept": context.swept,
        "status": "running",
        "error": None,
    }
    if context.in_sweep:
        attrs["sweep"] = {"id": context.sweep_id, "dir": context.sweep_dir}
        attrs["job_num"] = context.job_num
    return attrs


IDENTITY = ("name", "overrides", "swept", "sweep", "job_num")  # what a resumed job's run keeps as it was


def open_run(aim, *, run_hash: str | None, repo: str, experiment: str, attrs: dict[str, Any]):
    """A new Aim run in `experiment` with `attrs`; or, given `run_hash`, the run a resumed job continues.

    A resumed job is the same run: its name, overrides, sweep and experiment stay as its first job
    set them (the resume's own command line, ``resume=<dir>`` and little else, would rename it
    "defaults" and move it to an experiment named after the new run dir). What runs now (hparams)
    and the status are updated, and the resume's overrides are appended to ``run["resumes"]``.
    """
    # capture_terminal_logs off: the run lives in a child process (remote.py) whose stdout is the pipe
    # to its job, protocol lines and no logs
    exit_cleanup_in_place()  # a repo on a server was not prepared here (prepare_repo sees to it for a local one)
    if run_hash is None:
        run = aim.Run(repo=repo, capture_terminal_logs=False)
        try:  # named and set up once it exists: a run that fails here is deleted, never left half-made
            run.experiment = experiment
            apply_attributes(run, attrs)
        except BaseException as exc:
            run_hash = run.hash
            run.close()
            run = None  # no reference left (the traceback's frames are cleared too): its storage closes now
            traceback.clear_frames(exc.__traceback__)
            discard_run(aim, repo, run_hash)
            raise
        return run
    run = aim.Run(run_hash=run_hash, repo=repo, capture_terminal_logs=False)  # no experiment: it keeps its own
    try:
        resumes = list(run["resumes"])
    except KeyError:
        resumes = []
    apply_attributes(run, {k: v for k, v in attrs.items() if k not in IDENTITY})
    run["resumes"] = [*resumes, list(attrs.get("overrides", []))]
    return run


def discard_run(aim, repo: str, run_hash: str) -> None:
    """Delete a run that failed to start, once nothing refers to it (best effort: its failure is what gets said)."""
    import gc

    gc.collect()  # Aim's storage closes with the run object: deleted before that, its finalizer writes again
    try:
        aim.Repo(repo).delete_run(run_hash)
    except Exception:  # noqa: BLE001, S110 - best effort: the failure said is the run's, not this clean-up's
        pass


def apply_attributes(run, attrs: dict[str, Any]) -> None:
    """Set `attrs` on an Aim run; "name" is the run's name (``run.name``), not a param."""
    for key, value in attrs.items():
        if key == "name":
            run.name = value
        else:
            run[key] = value


def experiment_name(experiment: str | None, context: JobContext) -> str:
    return str(experiment or context.experiment or "tcgexp")


def mark_run(
    repo: str | Path, run_hash: str, attrs: dict[str, Any], tags: tuple[str, ...] = (), untag: tuple[str, ...] = ()
) -> bool:
    """Set `attrs` and move tags on a run of the local repo at `repo` after its job ended (the halving
    sweeper's trial status: pruned, promoted, complete, and its rung). Bounded like every wait on
    tracking; False (said in one line) when the run could not be marked."""

    def work(run) -> None:
        apply_attributes(run, attrs)
        for old in untag:
            if old in (run.props.tags or []):
                run.remove_tag(old)
        for tag in tags:
            if tag not in (run.props.tags or []):
                run.add_tag(tag)

    return _after(repo, run_hash, work, failed="could not mark")


def track_after(repo: str | Path, run_hash: str, values: dict[str, float], *, step: int) -> bool:
    """Track `values` into a run of the local repo at `repo` after its job ended (``tcgexp-eval``'s win rates),
    each in its subset's context, without touching its attributes. Bounded like every wait on tracking; False
    (said in one line) when the run could not be written."""

    def work(run) -> None:
        for context, group in by_context(values):
            run.track(group, step=step, context=context)

    return _after(repo, run_hash, work, failed="could not write to")


def _after(repo: str | Path, run_hash: str, work, *, failed: str) -> bool:
    """`work(run)` on an ended job's run of the local repo at `repo`, the run closed after; within CLOSE_SECONDS.
    False, said in one line ("[tracking] <failed> Aim run ..."), when it raised or did not answer in time."""
    import aim

    quiet_aim()
    errors: list[Exception] = []

    def opened() -> None:
        try:
            run = aim.Run(run_hash=run_hash, repo=str(Path(repo).expanduser().absolute()))
            try:
                work(run)
            finally:
                run.close()
        except Exception as exc:  # noqa: BLE001 - said below, once
            errors.append(exc)

    if within(CLOSE_SECONDS, opened) and not errors:
        return True
    why = one_line(errors[0]) if errors else f"no answer in {CLOSE_SECONDS:.0f} s"
    print(f"[tracking] {failed} Aim run {run_hash} in {repo} ({why})", file=sys.stderr, flush=True)
    return False
