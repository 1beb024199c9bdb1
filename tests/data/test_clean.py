"""`clean` and `verify=full` read the replay ZIP before trusting it; `clean` never overlaps a build."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from tcgexp.data import DataError
from tests.conftest import TINY, make_corpus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def day(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    corpus.build()
    return corpus, corpus.paths(corpus.dates[0])


def truncate(p) -> None:
    data = p.zip.read_bytes()
    p.zip.write_bytes(data[: len(data) // 2])


def bad_crc(p, member="shard_00001.jsonl") -> None:
    data = bytearray(p.zip.read_bytes())
    with zipfile.ZipFile(p.zip) as zf:
        info = zf.getinfo(member)
    data[info.header_offset + 30 + len(info.filename) + 8] ^= 0xFF  # inside the member's compressed bytes
    p.zip.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["truncated", "bad-crc"])
def test_full_verify_reads_the_zip_and_names_it(day, damage):
    corpus, p = day
    truncate(p) if damage == "truncated" else bad_crc(p)
    make_corpus(corpus.root).build()  # quick verify reads the Parquet's metadata only
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root, "dataset.verify=full").build()
    assert str(p.zip) in str(err.value)
    if damage == "bad-crc":
        assert "shard_00001.jsonl" in str(err.value)


@pytest.mark.parametrize("damage", ["truncated", "bad-crc"])
def test_clean_refuses_to_delete_the_only_readable_copy(day, damage):
    corpus, p = day
    truncate(p) if damage == "truncated" else bad_crc(p)
    before = p.parquet.read_bytes()
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).clean_derived(corpus.dates[0])
    assert str(p.zip) in str(err.value) and "not cleaning" in str(err.value)
    if damage == "bad-crc":
        assert "shard_00001.jsonl" in str(err.value)
    assert p.parquet.read_bytes() == before and p.manifest.exists()
    assert corpus.catalog.get(corpus.dates[0]) is not None


def test_clean_of_a_zip_from_other_settings_is_refused(day):
    corpus, p = day
    with pytest.raises(DataError, match="seed"):
        make_corpus(corpus.root, "dataset.seed=9").clean_derived(corpus.dates[0])
    assert p.parquet.exists()


def test_the_data_command_exits_non_zero_naming_the_member(day):
    corpus, p = day
    bad_crc(p)
    proc = subprocess.run(
        [sys.executable, "-m", "tcgexp.data", "action=clean", f"dataset.root={corpus.root}", *TINY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "shard_00001.jsonl" in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]
    assert p.parquet.exists()


def test_clean_waits_for_the_build_lock(day):
    """A clean while a build holds the lock waits for it, so the build keeps its files and leaves no .tmp."""
    corpus, p = day
    with open(corpus.root / ".build.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a running build holds
        cleaner = threading.Thread(target=make_corpus(corpus.root).clean_derived, args=(corpus.dates[0],))
        cleaner.start()
        cleaner.join(1.0)
        assert cleaner.is_alive() and p.parquet.exists() and p.manifest.exists(), "nothing removed under a build"
        fcntl.flock(held, fcntl.LOCK_UN)
    cleaner.join(30)
    assert not cleaner.is_alive() and not p.parquet.exists() and not p.manifest.exists()
    assert not list(p.parquet.parent.glob("*.tmp"))
    assert make_corpus(corpus.root).build() == {corpus.dates[0]: "built"}, "rebuilt from the ZIP"
