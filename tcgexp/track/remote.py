"""Tracking to a remote ``aim server`` from a child process, so the server can never stall training.

Aim's remote client queues every message and retries a failed send forever,
and its exit-time cleanup waits for that queue: a job whose server went away
would finish training and then hang at exit. So the Aim run lives in a child
process (``python -m tcgexp.track.remote``) fed JSON lines through a bounded
queue; the job checks the server with a TCP connect every few seconds, and
when it is gone says so once and kills the child. Training never waits on it.
(The same child, given a local repo, is what ``tracking=aim`` runs: ``aim_run.AimTracker``.)
"""

from __future__ import annotations

import gc
import json
import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlparse

from ..ownership import HeldLock
from ..schema import schema
from . import TrackingConfig
from .aim_repo import TrackingUnavailable, one_line, prepare_repo, say_untracked
from .aim_run import OPEN_SECONDS, RECORD_LOCK, by_context, experiment_name, open_run, run_attributes, run_record
from .context import JobContext

CHECK_SECONDS = 5.0
IMPORT_SECONDS = 30.0  # the child importing aim on a loaded machine; no server involved
START_SECONDS = 5.0  # a server that accepts connections yet never answers must not delay training longer
STALL_SECONDS = 10.0  # at close: the longest the child may make no progress flushing before it is killed


@schema("tracking", "aim_remote")
class AimRemoteTrackingConfig(TrackingConfig):
    uri: str = "aim://127.0.0.1:53800"  # aim://host:port of a running `aim server`
    CHECKS: ClassVar[tuple] = (
        ("uri", lambda v: str(v).startswith("aim://"), "aim://host:port of a running aim server"),
    )


class RemoteAimTracker:
    def __init__(
        self, *, uri: str, experiment: str | None, hparams: dict, context: JobContext, resume_hash: str | None = None
    ) -> None:
        init = {
            "experiment": experiment_name(experiment, context),
            "resume_hash": resume_hash,
            "attrs": run_attributes(hparams, context),
            "record": run_record(context),
        }
        self.uri = uri = str(uri)
        url = urlparse(uri)
        self.address = (url.hostname or "127.0.0.1", url.port or 53800)
        self.hash: str | None = None
        self._closing = False
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue(maxsize=100_000)
        self._checked = time.monotonic()
        if not self._alive():
            self._say(f"no Aim server answers at {uri}")
            return
        try:  # any failure here (no child, a broken pipe, a silent server) costs tracking only
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tcgexp.track.remote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
            self.proc.stdin.write(json.dumps({"uri": uri, **init}) + "\n")
            self.proc.stdin.flush()
            reply = self._reply(IMPORT_SECONDS)  # the child's own start: Python and aim imported, no server yet
            if reply.get("imported"):
                reply = self._reply(START_SECONDS)  # the server's part: a silent server costs START_SECONDS
        except Exception as exc:  # noqa: BLE001
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        if "hash" not in reply:
            silent = f"no answer in {START_SECONDS:.0f} s"
            self._stop(f"could not start an Aim run at {uri} ({reply.get('error', silent)})")
            return
        self.hash = reply["hash"]
        self._writer = threading.Thread(target=self._write, daemon=True, name="tcgexp-aim-remote")
        self._writer.start()

    def _reply(self, seconds: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], seconds)
        try:
            return json.loads(self.proc.stdout.readline() or "{}") if ready else {}
        except ValueError:
            return {}

    def _write(self) -> None:
        while True:
            line = self._lines.get()
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return
            if line is _CLOSE:
                return

    def _alive(self) -> bool:
        try:
            with socket.create_connection(self.address, timeout=1.0):
                return True
        except OSError:
            return False

    def _say(self, why: str) -> None:
        say_untracked(why)

    def _stop(self, why: str) -> None:
        self._say(why)
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def track(
        self, values: dict[str, float], *, step: int, epoch: int | None = None, context: dict | None = None
    ) -> None:
        if self.proc is None:
            return
        now = time.monotonic()
        if now - self._checked >= CHECK_SECONDS:
            self._checked = now
            if not self._alive() or self.proc.poll() is not None:
                self._stop(f"lost the Aim server at {self.uri}")
                return
        try:
            self._lines.put_nowait(
                json.dumps({"values": values, "step": step, "epoch": epoch, "context": context}) + "\n"
            )
        except queue.Full:
            pass  # the child is far behind; dropping a point beats stalling the step

    def _send(self, msg: dict) -> None:
        if self.proc is None:
            return
        try:
            self._lines.put_nowait(json.dumps(msg) + "\n")
        except queue.Full:
            pass

    def finish(self, status: str) -> None:
        self._send({"attrs": {"status": status, "error": None}, "untag": "failed"})

    def fail(self, reason: str) -> None:
        self._send({"attrs": {"status": "failed", "error": reason}, "tag": "failed"})

    def begin_close(self) -> None:
        """The run's last lines queued; the child flushes them while the job tears down (``close`` waits)."""
        if self.proc is not None and not self._closing:
            self._closing = True
            self._lines.put(_CLOSE)

    def close(self, within: float | None = None) -> None:
        """Flushing may take as long as the server takes lines (120 s at most, STALL_SECONDS without progress), or
        `within` seconds (a run stopping for a signal has a budget)."""
        if self.proc is None:
            return
        self.begin_close()
        deadline = time.monotonic() + (120 if within is None else within)
        left, moved = self._lines.qsize(), time.monotonic()
        while self.proc.poll() is None:  # flushing: fine while the server takes it, bounded when it stalls
            if not self._alive():
                self._stop(f"lost the Aim server at {self.uri}")
                return
            if self._lines.qsize() < left:
                left, moved = self._lines.qsize(), time.monotonic()
            if time.monotonic() - moved > STALL_SECONDS:
                self._stop(f"the Aim run at {self.uri} made no progress flushing for {STALL_SECONDS:.0f} s")
                return
            if time.monotonic() > deadline:
                self._stop(
                    f"the Aim run at {self.uri} did not finish flushing in {120 if within is None else within:.0f} s"
                )
                return
            try:
                self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None


_CLOSE = json.dumps({"close": True}) + "\n"


def child() -> None:
    """The child: an Aim run fed from stdin (its init line, its lines, "close"); then, when the job said it may
    (``reuse``: a job of a sweep, ``aim_run.AimTracker``), the next job's run in the same process, which saves that
    job importing Aim and opening the repo again. It ends when its stdin does, or after a run it may not follow."""
    import signal

    # the job owns this process: it says "close" (or its stdin ends with it) and kills it when it gives
    # up. A signal meant for the job (Ctrl-C reaches the whole foreground group, scancel every process
    # of the step) must not end the run before the job's last lines (its status among them) are written
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    # Aim's own threads and finalizers retry a failed write and print its traceback (RocksIOError on a full
    # disk) onto the job's stderr: what failed is said once, by the job, from the line this child sends
    threading.excepthook = lambda args: None
    sys.unraisablehook = lambda unraisable: None

    def reply(msg: dict) -> None:
        """To the job; a job that is gone (SIGKILLed while this process started) reads nothing, and the lines
        it sent are still in the pipe: the run is opened and written all the same."""
        try:
            print(json.dumps(msg), flush=True)
        except OSError:  # BrokenPipeError: stdout goes nowhere from now on, quietly (no error at exit either)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    niced = 0
    line = sys.stdin.readline()
    while line:
        init = json.loads(line)
        if init.get("prewarm"):  # started ahead of its first run (aim_run.prewarm): Aim imported while the job works
            import aim  # noqa: F401

            line = sys.stdin.readline()
            continue
        ok, niced = serve(init, reply, niced)
        if not (ok and init.get("reuse")):
            return
        # what this process's exit would do for the job waiting on it: the run's storage (RocksDB, the repo)
        # released and flushed by its finalizers, so whatever reads the repo next finds the run whole
        gc.collect()
        reply({"closed": True})  # the job hands this process to its next one (or lets its stdin end)
        line = sys.stdin.readline()


def serve(init: dict, reply, niced: int) -> tuple[bool, int]:
    """One run, from its init line to "close": (whether it closed cleanly, this process's niceness now)."""
    held = None
    if init.get("record"):  # held while the run is written: a resume of the job waits until it is
        held = HeldLock(Path(init["record"]).with_name(RECORD_LOCK), "aim run")
        deadline = time.monotonic() + OPEN_SECONDS
        try:
            while held.acquire() is not None and time.monotonic() < deadline:  # the folder's earlier run, closing
                time.sleep(0.1)
        except OSError:
            pass
    try:
        return _serve(init, reply, niced)
    finally:
        if held is not None:
            held.release()


def _serve(init: dict, reply, niced: int) -> tuple[bool, int]:
    import logging

    import aim

    logging.getLogger("aim").setLevel(logging.CRITICAL)
    reply({"imported": True})  # from here on, any wait is the server's (or the repo lock)
    try:
        # a local repo is created once, under its lock (aim_run.prepare_repo); a remote one is the server's
        repo = str(prepare_repo(init["repo"])) if "repo" in init else init["uri"]
        run = open_run(
            aim, run_hash=init.get("resume_hash"), repo=repo, experiment=init["experiment"], attrs=init["attrs"]
        )
    except TrackingUnavailable as exc:
        reply({"unavailable": str(exc)})
        return False, niced
    except Exception as exc:  # noqa: BLE001
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return False, niced
    reply({"hash": run.hash})
    if init.get("record"):  # the job may be gone before it reads the hash (SIGKILL): the run dir keeps it
        record = Path(init["record"])
        try:
            tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"hash": run.hash, "repo": repo}))
            os.replace(tmp, record)
        except OSError:
            pass
    # tracking=aim: from here on training keeps the cores and the run catches up in their idle time (opening
    # came first, at normal priority: the job's result.json waits for the hash); a process that served a
    # run before is there already (niceness only goes up)
    want = int(init.get("nice", 0))
    if want > niced:
        os.nice(want - niced)
        niced = want
    try:
        for line in iter(sys.stdin.readline, ""):  # (readline: what follows "close" stays for the next run)
            msg = json.loads(line)
            if msg.get("close"):
                break
            if "attrs" in msg:  # finish / fail
                for key, value in msg["attrs"].items():
                    run[key] = value
                if msg.get("tag"):
                    run.add_tag(msg["tag"])
                if msg.get("untag") in (run.props.tags or []):
                    run.remove_tag(msg["untag"])
                continue
            for context, group in by_context(msg["values"], msg.get("context")):
                run.track(group, step=msg["step"], epoch=msg["epoch"], context=context)
        else:
            run.close()
            return False, niced  # the job's end of stdin: nobody to hand this process to
        run.close()
    except Exception as exc:  # noqa: BLE001 - a full disk, a repo gone: said by the job, in one line
        reply({"lost": f"{type(exc).__name__}: {one_line(exc)}"})
        os._exit(0)  # not Aim's finalizers: they would retry the write that failed, and hang or print
    return True, niced


if __name__ == "__main__":
    child()
