"""The catalog is derived: damaged, it is re-indexed from the manifests; locked, one line names the holder;
a row whose files are gone is reported and left out."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest

from tcgexp.data import DataError
from tcgexp.data.catalog import LOCK_WAIT_S, Catalog
from tests.conftest import make_corpus


@pytest.fixture
def two_days(tmp_path):
    corpus = make_corpus(tmp_path / "data", "dataset.days=2")
    corpus.build()
    return corpus


def rows(corpus):
    return [(r["date"], r["sha256"]) for r in corpus.catalog.all()]


@pytest.mark.parametrize("damage", ["corrupt-page", "not-a-database"])
def test_a_damaged_catalog_is_reindexed_from_the_manifests(two_days, damage, capsys):
    corpus = two_days
    want = rows(corpus)
    path = corpus.root / "catalog.sqlite"
    data = bytearray(path.read_bytes())
    page = 4096 if damage == "corrupt-page" else 0  # the table's page, or the header itself
    data[page : page + 4096] = b"\xa5" * 4096
    path.write_bytes(bytes(data))
    with sqlite3.connect(path) as con, pytest.raises(sqlite3.DatabaseError):
        con.execute("SELECT * FROM datasets").fetchall()  # really damaged
    assert make_corpus(corpus.root, "dataset.days=2").build() == {d: "validated" for d in corpus.dates}
    assert rows(corpus) == want
    err = capsys.readouterr().err
    assert "was damaged" in err and "re-indexed from 2 day manifests" in err
    assert (corpus.root / "catalog.sqlite.damaged").exists(), "kept for inspection, never deleted"


def test_a_damaged_catalog_under_a_date_selection_is_reindexed_too(two_days, capsys):
    corpus = two_days
    path = corpus.root / "catalog.sqlite"
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\x00\xff" * 2048
    path.write_bytes(bytes(data))
    chosen = make_corpus(corpus.root, f"dataset.date_from={corpus.dates[0]}")
    assert chosen.dates == corpus.dates
    assert "was damaged" in capsys.readouterr().err


def test_a_locked_catalog_waits_briefly_then_names_the_holder(two_days):
    path = two_days.root / "catalog.sqlite"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"con = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "con.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(DataError) as err:
            Catalog(path).all()
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    msg = str(err.value)
    assert "locked" in msg and f"pid {holder.pid}" in msg and "delete" not in msg
    assert LOCK_WAIT_S - 0.5 <= waited < LOCK_WAIT_S + 10


def test_a_row_pointing_at_a_missing_file_is_reported_and_left_out(two_days, capsys):
    corpus = two_days
    gone = corpus.paths(corpus.dates[1])
    gone.parquet.unlink()
    gone.manifest.unlink()
    assert [r["date"] for r in corpus.catalog.all()] == corpus.dates[:1]
    err = capsys.readouterr().err
    assert f"the row for {corpus.dates[1]} points at bc_data/{corpus.dates[1]}.parquet" in err and "missing" in err
    with pytest.raises(DataError, match=f"not built: {corpus.dates[1]}"):
        chosen = make_corpus(corpus.root, f"dataset.dates=[{corpus.dates[0]},{corpus.dates[1]}]")
        chosen.build(build_missing=False)
