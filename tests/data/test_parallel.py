"""Days built in parallel: byte-identical to one worker; adding a day touches only that day."""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from tcgexp.data.parallel import die_with_parent
from tests.conftest import make_corpus

VOLATILE = ("built_at", "build_seconds")  # wall-clock facts of a build, not of its content


def content(corpus) -> dict:
    out = {}
    for d in corpus.dates:
        p = corpus.paths(d)
        manifest = {k: v for k, v in json.loads(p.manifest.read_text()).items() if k not in VOLATILE}
        out[d] = (p.parquet.read_bytes(), manifest)
    return out


def test_multi_day_build_is_byte_identical_with_two_workers(tmp_path):
    serial = make_corpus(tmp_path / "one", "dataset.days=3", "dataset.workers=1")
    par = make_corpus(tmp_path / "two", "dataset.days=3", "dataset.workers=2")
    assert serial.build() == par.build() == {d: "built" for d in serial.dates}
    assert content(serial) == content(par)
    drop = lambda rows: [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
    assert drop(serial.catalog.all()) == drop(par.catalog.all())
    assert set(par.encoded) == set(par.dates) and all(par.encoded.values())
    assert not (tmp_path / "two" / "bc_data" / ".build").exists() or not any(
        (tmp_path / "two" / "bc_data" / ".build").iterdir()
    )


def test_adding_a_day_builds_only_that_day(tmp_path):
    root = tmp_path / "data"
    first = make_corpus(root, "dataset.days=2", "dataset.workers=2")
    first.build()
    stamps = {d: first.paths(d).parquet.stat().st_mtime_ns for d in first.dates}
    more = make_corpus(root, "dataset.days=3", "dataset.workers=2")
    outcome = more.build()
    assert outcome == {**{d: "validated" for d in first.dates}, more.dates[2]: "built"}
    assert {d: more.paths(d).parquet.stat().st_mtime_ns for d in first.dates} == stamps
    assert [r["date"] for r in more.catalog.all()] == more.dates


def _pdeathsig() -> int:
    sig = ctypes.c_int(0)
    ctypes.CDLL("libc.so.6").prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
    return sig.value


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_build_workers_die_with_their_parent():
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent) as pool:
        assert pool.submit(_pdeathsig).result() == signal.SIGKILL


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped by init
    except psutil.NoSuchProcess:
        return True


def _busy(process) -> bool:
    """Whether a worker has done some work yet (False for one that has just exited)."""
    import psutil

    try:
        return process.cpu_times().user > 0.3
    except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _cmdline(process) -> str:
    """A child's command line, or "" for one that has just exited (a zombie until reaped, or gone)."""
    import psutil

    try:
        return " ".join(process.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("days", [3, 1], ids=["whole-days", "shards-of-one-day"])
def test_sigkilled_build_leaves_no_worker_alive(tmp_path, days):
    """SIGKILL the parent of a 2-worker build mid-build: within seconds none of its processes is left."""
    import os
    import subprocess
    import time
    from pathlib import Path

    import psutil

    from tests.conftest import TINY

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tcgexp.data",
            f"dataset.root={tmp_path / 'data'}",
            *TINY,
            f"dataset.days={days}",
            "dataset.rows_per_day=20000",
            "dataset.workers=2",
        ],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline, workers = time.monotonic() + 60, []
        while time.monotonic() < deadline:  # until both workers have started working
            kids = psutil.Process(proc.pid).children(recursive=True)
            workers = [k for k in kids if "spawn_main" in _cmdline(k)]
            if len(workers) >= 2 and all(_busy(k) for k in workers[:2]):
                break
            time.sleep(0.1)
        assert len(workers) >= 2, "the build never started its workers"
        everyone = psutil.Process(proc.pid).children(recursive=True)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(k.pid) for k in everyone):
        time.sleep(0.1)
    left = [k.pid for k in everyone if not _gone(k.pid)]
    for pid in left:  # never leave them running past the test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes outlived their killed parent: {left}"
