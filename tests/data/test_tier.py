"""The local disk tier on its own: verified reads, the byte budget, ownership, concurrent writers."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import socket

import pytest

from tcgexp.data import DataError
from tcgexp.data.tier import TIER_MARKER, Tier

FILE = "f" * 64


def entry(i: int, size: int = 1000) -> tuple[int, str, bytes]:
    data = bytes([i % 251]) * size
    return i * size, hashlib.sha256(data).hexdigest(), data


def test_an_entry_reads_back_verified_and_a_damaged_one_is_a_miss(tmp_path):
    tier = Tier(tmp_path / "tier", 10**6)
    off, sha, data = entry(1)
    assert tier.get(FILE, off, sha) is None
    tier.put(FILE, off, sha, data)
    assert tier.get(FILE, off, sha) == data
    tier.path(FILE, off, sha).write_bytes(b"x" * len(data))
    with pytest.warns(RuntimeWarning, match="damaged; removed"):
        assert tier.get(FILE, off, sha) is None
    assert not tier.path(FILE, off, sha).exists()


def test_the_budget_evicts_least_recently_used_first(tmp_path):
    tier = Tier(tmp_path / "tier", 5000)
    made = [entry(i) for i in range(5)]
    for i, (off, sha, data) in enumerate(made):
        tier.put(FILE, off, sha, data)
        os.utime(tier.path(FILE, off, sha), (1000 + i, 1000 + i))  # put in order, oldest first
    assert tier.get(FILE, made[0][0], made[0][1]) is not None  # a hit makes the oldest the most recent
    off, sha, data = entry(9)
    tier.put(FILE, off, sha, data)  # 6000 > 5000: evict down to 90 %
    assert tier.usage() <= 0.9 * 5000
    assert tier.get(FILE, made[0][0], made[0][1]) is not None and tier.get(FILE, off, sha) is not None
    assert tier.get(FILE, made[1][0], made[1][1]) is None  # the least recently used went first


def test_a_folder_with_files_tcgexp_did_not_put_there_is_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(DataError, match="tcgexp did not put there.*dataset.storage.tier_dir"):
        Tier(tmp_path / "mine", 10**6)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    tier = Tier(tmp_path / "tier", 10**6)  # a tier: foreign files in it are never evicted
    (tier.root / "notes.txt").write_text("keep")
    (tier.root / FILE).mkdir(exist_ok=True)
    (tier.root / FILE / "notes.txt").write_text("keep")
    tier.budget = 1
    tier.evict()
    assert (tier.root / "notes.txt").exists() and (tier.root / FILE / "notes.txt").exists()
    assert (tier.root / TIER_MARKER).exists()


def test_a_dead_writers_temporary_file_is_reclaimed_a_live_ones_is_not(tmp_path):
    tier = Tier(tmp_path / "tier", 10**6)
    off, sha, _ = entry(1)
    (tier.root / FILE).mkdir()
    dead = subprocess_pid()
    host = socket.gethostname()
    stale = tier.root / FILE / f".{off}-{sha}.{host}.{dead}.1.tmp"
    live = tier.root / FILE / f".{off}-{sha}.{host}.{os.getpid()}.1.tmp"
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    Tier(tmp_path / "tier", 10**6)
    assert not stale.exists() and live.exists()


def subprocess_pid() -> int:
    p = mp.get_context("spawn").Process(target=int)
    p.start()
    p.join()
    return p.pid


def _writer(root: str, n: int) -> None:
    tier = Tier(root, 40_000)  # a budget smaller than what the two writers put: they evict under each other
    for i in range(n):
        off, sha, data = entry(i)
        tier.put(FILE, off, sha, data)
        got = tier.get(FILE, off, sha)
        assert got is None or got == data


def test_concurrent_jobs_share_one_tier_safely(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path / "tier"), 120)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    tier = Tier(tmp_path / "tier", 40_000)
    # each job counts its own writes between scans, so together they may pass the budget by what they wrote
    # since their last scan: at most 10 % of it and one entry each
    assert tier.usage() <= 0.9 * 40_000 + 2 * (4_000 + 1_000)
    assert not list((tmp_path / "tier").glob("*/.*.tmp"))
    for path in (tmp_path / "tier" / FILE).iterdir():  # whatever is left is whole
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name.split("-", 1)[1]
