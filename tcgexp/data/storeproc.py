"""The object store's client in a child process: every call bounded, abandonable and interruptible.

Why a process and not a thread: pyarrow's store clients block inside C++ with
the GIL released and run their own retry loops (GCS retries for up to 15
minutes by default; S3 for ``retries`` x ``request_timeout_s`` per call). A
thread blocked there cannot be stopped; Python's signal handlers do not run
while the main thread itself waits in C++ (so SIGTERM and Ctrl-C were
ignored); and at exit pyarrow waits for every S3 request still in flight. A
child process can simply be killed.

So the parent never calls pyarrow's filesystem: ``StoreProcess`` sends each
call to the child (``serve``) over a pipe and waits for the answer in Python,
``wait`` bounds that wait, and on the main thread a stopping signal (SIGINT,
SIGTERM, SIGHUP) ends it at once. When a call runs past its bound the child is
killed and the store counts as down: every later call fails at once with the
same line, so a store that stops answering costs one bound, not one per call.

The child leaves with ``os._exit`` as soon as its parent's end of the pipe
closes (the parent exited, was killed, or let the store go), skipping
pyarrow's wait for requests in flight, which nobody will read. (Not
PR_SET_PDEATHSIG: that fires when the *thread* that started the child ends.)
"""

from __future__ import annotations

import collections
import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, ClassVar

STOPPING = ("SIGINT", "SIGTERM", "SIGHUP")
POLL_S = 0.2  # how often the main thread's wait looks at the signals that arrived
SERVE_THREADS = 16  # concurrent calls in the child (a row group's ~10 chunks, the catalog's manifests)


class Gone(Exception):
    """The child is gone (killed after a timeout or a signal, or it died): the call has no answer."""


class Failed(Exception):
    """The store refused or failed the call (pyarrow raised in the child): its one-line reason."""


class TimedOut(Exception):
    """No answer within the call's bound."""


class Interrupted(Exception):
    """A stopping signal arrived while the main thread waited; ``signame`` says which."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


def wait(future: Future, bound_s: float, on_slow: Callable[[float], None] | None = None, slow_s: float = 5.0):
    """The future's result within `bound_s` (TimedOut after), interruptible on the main thread.

    On the main thread, SIGINT/SIGTERM/SIGHUP are taken for the wait only (the previous handlers are
    put back after): a signal ends the wait with ``Interrupted`` within ``POLL_S``. `on_slow` is
    called once, with the bound, when the wait passes `slow_s`: a long wait is never silent.
    """
    if threading.current_thread() is not threading.main_thread():
        try:
            return future.result(timeout=bound_s)
        except TimeoutError:
            raise TimedOut() from None
    arrived: list[str] = []
    previous = {}
    for name in STOPPING:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            previous[signum] = signal.signal(signum, lambda n, _f: arrived.append(signal.Signals(n).name))
    try:
        t0, said = time.monotonic(), False
        while True:
            try:
                return future.result(timeout=POLL_S)
            except TimeoutError:
                pass
            if arrived:
                raise Interrupted(arrived.pop(0))
            waited = time.monotonic() - t0
            if waited >= bound_s:
                raise TimedOut()
            if on_slow is not None and not said and waited >= slow_s:
                said = True
                on_slow(bound_s)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        if arrived:  # came with the answer (or the call's failure) in the same poll: not lost, the handler before
            signal.raise_signal(signal.Signals[arrived[0]])  # ours gets it (a run's stop, Ctrl-C's KeyboardInterrupt)


def abandon_all(why: str) -> None:
    """Kill every store's client process: every call in flight, whichever thread waits on it, fails at once
    (a run leaving after a stopping signal must not wait for a store that stopped answering)."""
    with StoreProcess._shared_lock:
        procs = [p for p in StoreProcess._shared.values() if not p.gone]
    for proc in procs:
        proc.kill(why)


class StoreProcess:
    """The parent's end: calls sent to the child, answers matched to futures by a reader thread."""

    _shared: ClassVar[dict[str, StoreProcess]] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def for_spec(cls, spec: dict) -> StoreProcess:
        """The live child for this store's settings, started on first use: a child costs a Python start and
        pyarrow's import (a few tenths of a second), and a process opens the same store many times (a run's
        corpus, publish, the tests). A child that was killed (a timeout, a signal) is replaced."""
        key = json.dumps(spec, sort_keys=True)
        with cls._shared_lock:
            if not cls._shared:
                # at exit, before Python joins its worker threads (fetch threads waiting on a store that stopped
                # answering would hold the exit up to their bound): concurrent.futures' own hook, run last-in first
                threading._register_atexit(cls._abandon_all)
            proc = cls._shared.get(key)
            if proc is None or proc.gone:
                proc = cls._shared[key] = cls(spec)
            return proc

    def __init__(self, spec: dict) -> None:
        rx_child, tx_parent = os.pipe()
        rx_parent, tx_child = os.pipe()
        # run as a script: no tcgexp import (the data package would cost the child 0.3 s), stdlib and pyarrow
        # only; -P keeps this file's folder off sys.path (its select.py would shadow the standard library's)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", __file__, str(rx_child), str(tx_child)],
            pass_fds=(rx_child, tx_child),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        os.close(rx_child)
        os.close(tx_child)
        self._tx, self._rx = Connection(tx_parent, readable=False), Connection(rx_parent, writable=False)
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._gone: str | None = None
        self._pending[0] = self.ready = Future()  # answered once the child has made its filesystem
        # what the SDK prints (Azure's "terminate called ...", curl's noise) is kept, not shown: the one
        # line for the user quotes its last words when the child dies
        self._said: collections.deque[str] = collections.deque(maxlen=20)
        self._tx.send(spec)
        threading.Thread(target=self._drain, name="tcgexp-store-stderr", daemon=True).start()
        threading.Thread(target=self._read, name="tcgexp-store-reader", daemon=True).start()

    def _drain(self) -> None:
        for raw in self.proc.stderr:
            line = " ".join(raw.decode(errors="replace").split())
            if line:
                self._said.append(line)

    @classmethod
    def _abandon_all(cls) -> None:
        with cls._shared_lock:
            procs = list(cls._shared.values())
        for proc in procs:
            proc.kill("the process is exiting")

    @property
    def gone(self) -> bool:
        return self._gone is not None

    def submit(self, op: str, *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._gone is not None:
                future.set_exception(Gone(self._gone))
                return future
            call_id = next(self._ids)
            self._pending[call_id] = future
            try:
                self._tx.send((call_id, op, args))
            except OSError:  # the child is gone; the reader fails every pending call
                pass
        return future

    def _read(self) -> None:
        while True:
            try:
                call_id, ok, value = self._rx.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._pending.pop(call_id, None)
            if future is not None:
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(Failed(value))
        self._fail_all(self._death())

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
        said = list(self._said)
        telling = [line for line in said if "what():" in line or "rror" in line] or said  # C++'s own reason first
        last = f": {telling[-1][:200]}" if telling else ""
        return f"the store's client process died ({how}){last}"

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._gone = self._gone or why
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(Gone(self._gone))

    def kill(self, why: str) -> None:
        """Abandon every call: the child is killed (whatever it is blocked in), pending calls fail."""
        with self._lock:
            self._gone = self._gone or why
        stop(self.proc, self._tx)
        self._fail_all(why)


def stop(proc: subprocess.Popen, tx: Connection) -> None:
    """Kill the child and reap it (a finalizer too: no reference to the StoreProcess)."""
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for end in (tx, proc.stderr):
        try:
            end.close()
        except (OSError, AttributeError):
            pass


# -- the child -----------------------------------------------------------------------------------------------
def make_filesystem(spec: dict):
    """(filesystem, base path) from the spec ``tcgexp.data.store`` sends: the timeouts of every scheme."""
    import pyarrow.fs as pafs

    scheme, uri = spec["scheme"], spec["uri"]
    if scheme == "s3":
        kwargs = dict(spec["s3"])
        kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=kwargs.pop("retries"))
        return pafs.S3FileSystem(**kwargs), spec["base"]
    if scheme in ("gs", "gcs"):  # the client's own retry loop would run for 15 minutes by default
        return pafs.GcsFileSystem(retry_time_limit=dt.timedelta(seconds=spec["retry_time_limit_s"])), spec["base"]
    fs, path = pafs.FileSystem.from_uri(uri)  # abfs, hdfs: their SDK's defaults, bounded by the parent's wait
    return fs, path.rstrip("/")


def reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def serve(rx: Connection, tx: Connection) -> None:
    import pyarrow.fs as pafs

    send_lock = threading.Lock()

    def reply(call_id: int, ok: bool, value: Any) -> None:
        with send_lock:
            try:
                tx.send((call_id, ok, value))
            except OSError:
                os._exit(0)  # the parent is gone

    pool = ThreadPoolExecutor(SERVE_THREADS, thread_name_prefix="tcgexp-store")
    # made off the main thread, which only reads the pipe: it must see the parent leave whatever blocks
    made = pool.submit(make_filesystem, rx.recv())
    made.add_done_callback(
        lambda f: reply(0, False, reason(f.exception())) if f.exception() is not None else reply(0, True, f.result()[1])
    )

    handles: dict[int, Any] = {}  # open random-access files, by the number "open" answered
    numbers = itertools.count(1)

    def fs():
        return made.result()[0]

    def open_file(path: str) -> tuple[int, int]:
        h = fs().open_input_file(path)
        number = next(numbers)
        handles[number] = h
        return number, h.size()

    def info(path: str) -> tuple[str, int, int]:
        i = fs().get_file_info(path)
        kind = {pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}.get(i.type, "none")
        return kind, int(i.size or 0), int(i.mtime_ns or 0)

    def read(path: str) -> bytes:
        with fs().open_input_stream(path) as fh:
            return fh.read()

    def write(path: str, data: bytes) -> None:
        with fs().open_output_stream(path) as out:
            out.write(data)

    def upload(local: str, path: str, block: int = 8 << 20) -> None:
        with open(local, "rb") as src, fs().open_output_stream(path) as out:
            for chunk in iter(lambda: src.read(block), b""):
                out.write(chunk)

    def listing(path: str) -> list[tuple[str, bool]]:
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        return [(i.base_name, i.type == pafs.FileType.File) for i in fs().get_file_info(selector)]

    def close(number: int) -> None:
        h = handles.pop(number, None)
        if h is not None:
            h.close()

    ops: dict[str, Callable] = {
        "info": info,
        "read": read,
        "write": write,
        "upload": upload,
        "list": listing,
        "close": close,
        "delete": lambda path: fs().delete_file(path),
        "open": open_file,
        "read_at": lambda number, offset, length: handles[number].read_at(length, offset),
    }

    def run(call_id: int, op: str, args: tuple) -> None:
        try:
            value = ops[op](*args)
        except Exception as exc:  # noqa: BLE001 - the parent turns it into its one line
            reply(call_id, False, reason(exc))
        else:
            reply(call_id, True, value)

    while True:
        try:
            call_id, op, args = rx.recv()
        except (EOFError, OSError):
            os._exit(0)  # the parent closed the pipe: nobody reads what is still in flight
        pool.submit(run, call_id, op, args)


def main(argv: list[str]) -> None:
    rx_fd, tx_fd = (int(a) for a in argv)
    for name in STOPPING:  # the parent decides; a Ctrl-C at the terminal reaches the whole group otherwise
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    serve(Connection(rx_fd, writable=False), Connection(tx_fd, readable=False))
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
