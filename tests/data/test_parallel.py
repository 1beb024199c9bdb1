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
    drop = lambda rows: [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]  # noqa: E731
    assert drop(serial.catalog.all()) == drop(par.catalog.all())
    assert set(par.encoded) == set(par.dates) and all(par.encoded.values())
    assert not (tmp_path / "two" / "bc_data" / ".build").exists() or \
        not any((tmp_path / "two" / "bc_data" / ".build").iterdir())


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
