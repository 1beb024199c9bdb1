"""Every call to an object store is bounded and interruptible, whatever the scheme and however the store fails.

The stores here have no network to reach (gs://, abfs://, hdfs:// on this machine), accept connections and
never answer (a raw socket; moto's server frozen with SIGSTOP), or answer wrongly (a bucket that does not
exist, an object replaced by a shorter one). Each ends in one line naming the store, within its bound; a
signal ends the wait within seconds, with 128 + signum; a scheme no filesystem of pyarrow's reads is refused
before anything is tried.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tcgexp.app import compose
from tcgexp.bench.loopback_s3 import silent_server
from tcgexp.config import build
from tcgexp.data import DataError
from tests.train.conftest import TINY_TRAIN

pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")

from tcgexp.bench.loopback_s3 import loopback_s3, moto_process
from tcgexp.data.publish import publish
from tcgexp.data.source import ParquetSource
from tcgexp.plan.loader import TRAIN_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
DAYS = ["dataset.rows_per_day=600", "dataset.row_group_rows=256"]
QUICK = ["dataset.storage.retries=1", "dataset.storage.request_timeout_s=1", "dataset.storage.connect_timeout_s=1"]
QUICK_BOUND_S = 1 * (1 + 1) + 5  # Store.bound_s for QUICK: retries x (connect + request) + the margin
NO_NETWORK = {
    "gs": "gs://tcgexp-nowhere/corpus",
    "abfs": "abfs://corpus@tcgexpnowhere.dfs.core.windows.net/5d",
    "hdfs": "hdfs://tcgexp-namenode:8020/corpus",
}


def remote(uri: str, tmp_path, *more: str):
    return build(compose(f"dataset.root={uri}", *DAYS, f"dataset.storage.tier_dir={tmp_path / 'tier'}", *more).dataset)


def one_line(msg: str, *names: str) -> None:
    assert "\n" not in msg and len(msg) < 1200, msg
    for name in names:
        assert name in msg, (name, msg)


@pytest.mark.parametrize(
    "uri",
    ["http://example.com/corpus", "ftp://example.com/corpus", "sftp://host/corpus", "memory://corpus", "mock://corpus"],
)
def test_a_scheme_no_store_reads_is_refused_up_front_listing_the_ones_that_work(uri, tmp_path):
    from tcgexp.data.storeproc import StoreProcess

    before = dict(StoreProcess._shared)
    t0 = time.monotonic()
    with pytest.raises(DataError) as err:
        remote(uri, tmp_path)
    # up front, not after a connection's timeout or retries (tens of seconds); a bound, not a timing: looking the
    # scheme up in fsspec's registry once took 3.4 s on a loaded machine
    assert time.monotonic() - t0 < 10
    one_line(str(err.value), f"dataset.root={uri}", "s3://", "gs://", "abfs://", "hdfs://", "local folder")
    assert StoreProcess._shared == before, "refused before any client was started"


@pytest.mark.parametrize("scheme", sorted(NO_NETWORK))
def test_a_store_out_of_reach_fails_within_its_bound_with_one_line_naming_it(scheme, tmp_path):
    """No network here: GCS's client would retry for 15 minutes, Azure's aborts its process, HDFS has no JVM.
    Through tcgexp-train, as a user meets it."""
    uri = NO_NETWORK[scheme]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"dataset.root={uri}",
            *TINY_TRAIN,
            *QUICK,
            f"dataset.storage.tier_dir={tmp_path / 'tier'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=QUICK_BOUND_S + 60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 1, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr[-3000:]  # the SDK's own noise (Azure's "terminate called ...") kept out
    one_line(lines[0], "error: ", uri, "failed at")


def test_a_silent_store_is_one_bounded_wait_then_down_for_every_later_call(tmp_path):
    """A server that accepts and never answers: the first call ends after the SDK's timeouts, every later one
    at once (the store counts as down), never one wait per day."""
    with silent_server() as endpoint:
        t0 = time.monotonic()
        with pytest.raises(DataError) as err:
            remote("s3://tcgexp/x", tmp_path, f"dataset.storage.endpoint={endpoint}", *QUICK)
        first = time.monotonic() - t0
        assert first < QUICK_BOUND_S + 5
        one_line(str(err.value), "s3://tcgexp/x", endpoint, "counts as down")


def built(tmp_path):
    """A small local corpus to publish."""
    local = build(compose(f"dataset.root={tmp_path / 'local'}", *DAYS).dataset)
    local.build()
    return local


@pytest.mark.slow
def test_a_frozen_moto_server_mid_run_is_one_bounded_line_then_down(tmp_path):
    """moto's own server, SIGSTOPped after the corpus was opened: the next read fails within the bound
    naming the store, and the one after it at once."""
    local = built(tmp_path)
    with moto_process() as (endpoint, server):
        publish(local, "s3://tcgexp/frozen", None)
        corpus = remote("s3://tcgexp/frozen", tmp_path, *QUICK)
        corpus.build()
        src = ParquetSource(corpus.files, TRAIN_COLUMNS)
        os.kill(server.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(DataError) as err:
            src.read((0, 0))
        assert time.monotonic() - t0 < QUICK_BOUND_S + 5
        one_line(str(err.value), "s3://tcgexp/frozen/bc_data/", endpoint)
        t0 = time.monotonic()
        with pytest.raises(DataError, match="counts as down"):
            src.read((0, 1))
        assert time.monotonic() - t0 < 1


def start_and_signal(args: list[str], signum: int, cwd: Path, wait_for: str = "[data] waiting for"):
    """Start an entry point, wait (at most 90 s) for its line saying it waits on the store, send `signum`;
    (exit status, stderr, seconds from the signal to the exit)."""
    import queue
    import threading

    # with a foreground process's dispositions: a child inherits an ignored SIGINT across exec, and the wait rightly
    # leaves an ignored signal ignored; set in a small exec'ing parent (no preexec_fn: a fork of a threaded pytest)
    terminal = (
        "import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)]; "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", terminal, "-m", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr] + [lines.put(None)], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while not (seen and wait_for in seen[-1]):
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                pytest.fail(f"exited before waiting on the store: {''.join(seen)[-2000:]}")
            seen.append(line)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"no line saying it waits on the store within 90 s: {''.join(seen)[-2000:]}")
    os.kill(proc.pid, signum)
    t0 = time.monotonic()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{signal.Signals(signum).name} ignored for 30 s while waiting on the store")
    seconds = time.monotonic() - t0
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    return proc.returncode, "".join(seen), seconds


@pytest.mark.parametrize(
    "app, signum",
    [
        pytest.param("tcgexp.train", signal.SIGTERM, id="train-SIGTERM"),
        pytest.param("tcgexp.data", signal.SIGINT, id="data-SIGINT", marks=pytest.mark.slow),
    ],
)
def test_a_signal_ends_a_wait_on_a_store_out_of_reach_within_seconds(app, signum, tmp_path):
    """gs:// without a network (the client retries inside C++ with the GIL released): the run's own SIGTERM
    handler, and Ctrl-C, both end the wait."""
    uri = NO_NETWORK["gs"]
    args = [app, f"dataset.root={uri}", f"dataset.storage.tier_dir={tmp_path / 'tier'}"]
    if app == "tcgexp.train":
        args += [*TINY_TRAIN, "tracking=off", f"hydra.run.dir={tmp_path / 'run'}"]
    rc, err, seconds = start_and_signal(args, signum, tmp_path)
    name = signal.Signals(signum).name
    assert rc == 128 + signum and seconds < 5, (rc, seconds, err[-2000:])
    last = err.strip().splitlines()[-1]
    one_line(last, f"interrupted by {name}", uri)
    assert "Traceback" not in err


def test_a_signal_ends_a_wait_on_a_silent_s3_store_within_seconds(tmp_path):
    with silent_server() as endpoint:
        rc, err, seconds = start_and_signal(
            [
                "tcgexp.train",
                "dataset.root=s3://tcgexp/x",
                f"dataset.storage.endpoint={endpoint}",
                *TINY_TRAIN,
                "tracking=off",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            signal.SIGTERM,
            tmp_path,
        )
    assert rc == 143 and seconds < 5, (rc, seconds, err[-2000:])
    one_line(err.strip().splitlines()[-1], "interrupted by SIGTERM", "s3://tcgexp/x", endpoint)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_training_from_a_frozen_moto_server_within_seconds(signum, tmp_path):
    local = built(tmp_path)
    with moto_process() as (endpoint, server):
        publish(local, "s3://tcgexp/frozen", None)
        os.kill(server.pid, signal.SIGSTOP)
        rc, err, seconds = start_and_signal(
            [
                "tcgexp.train",
                "dataset.root=s3://tcgexp/frozen",
                *TINY_TRAIN,
                *DAYS,
                "tracking=off",
                f"hydra.run.dir={tmp_path / 'run'}",
                f"dataset.storage.tier_dir={tmp_path / 'tier'}",
            ],
            signum,
            tmp_path,
        )
    assert rc == 128 + signum and seconds < 5, (rc, seconds, err[-2000:])
    one_line(err.strip().splitlines()[-1], "s3://tcgexp/frozen", endpoint)


def test_a_bucket_that_does_not_exist_is_named_as_such(tmp_path):
    with loopback_s3("tcgexp") as endpoint, pytest.raises(DataError) as err:
        remote("s3://tcgexp-typo/corpus", tmp_path)
    one_line(str(err.value), "bucket 'tcgexp-typo' does not exist", endpoint)
    assert "not published" not in str(err.value)


def test_an_object_replaced_by_a_shorter_one_after_opening_is_named_as_such(tmp_path):
    """The run opened the day (footer read, object open); then someone replaces the object with a shorter
    one: the next range past its new end is named as a replaced object, not as a store failure."""
    local = built(tmp_path)
    with loopback_s3("tcgexp"):
        publish(local, "s3://tcgexp/short", None)
        corpus = remote("s3://tcgexp/short", tmp_path)
        corpus.build()
        src = ParquetSource(corpus.files, TRAIN_COLUMNS)
        src.read((0, 0))
        day = local.dates[0]
        data = local.paths(day).parquet.read_bytes()
        from tcgexp.data.store import Store

        Store("s3://tcgexp/short", writable=True).write_bytes(f"bc_data/{day}.parquet", data[: len(data) // 3])
        last = src.row_groups[0] - 1
        with pytest.raises(DataError) as err:
            src.read((0, last))
    one_line(
        str(err.value),
        f"s3://tcgexp/short/bc_data/{day}.parquet",
        f"object is {len(data) // 3} bytes",
        f"published manifest says {len(data)}",
        "replaced",
    )
