"""The SSD spill tier: round trip, corruption recovery, budget, cleanup, disk-full."""

from __future__ import annotations

import dataclasses
import errno
import gc
import io
import random
import warnings

import numpy as np
import pytest

from tcgexp.cache.spill import MARKER, RECORDS, SpillStore, estimate_bytes
from tcgexp.data.source import packed_records
from tests.cache.conftest import COLUMNS, Probe, assert_same, spill_dir_bytes
from tests.cache.test_policy import belady_hits
from tests.conftest import cache_of


def make(files, spill_dir, **kw):
    kw.setdefault("policy", "lru")
    kw.setdefault("capacity", 1)
    kw.setdefault("opt_step_guard", "all")
    return cache_of(files, COLUMNS, spill=True, spill_dir=spill_dir, memory_probe=Probe(), **kw)


def test_round_trip_through_disk(corpus_files, all_keys, reference, tmp_path):
    a, b = all_keys[0], all_keys[1]
    with make(corpus_files, tmp_path / "spill") as cache:
        cache.get(a)
        cache.get(b)  # capacity 1: a is evicted to disk
        assert (tmp_path / "spill" / "rg-0-0.npz").exists()
        loaded = cache.counters()["bytes_loaded"]
        got = cache.get(a)
        assert_same(got, reference[a])
        assert all(not arr.flags.writeable for arr in got.values())
        c = cache.counters()
    assert c["ssd_hits"] == 1 and c["decodes"] == 2
    assert c["bytes_loaded"] == loaded, "a disk read is not a Parquet decode"
    assert c["evictions"] == 2 and c["ssd_spills"] == 2 and c["ssd_resident"] == 2
    assert c["hits"] + c["misses"] == c["accesses"] == 3


def test_a_packed_row_group_is_spilled_as_its_records_and_read_back_packed(corpus_files, all_keys, reference, tmp_path):
    """Touched twice, a row group is packed row-major (one gather per microbatch); spilled, it is written as that
    one buffer and comes back as views of one, so it is not packed again; its values are the decoded ones."""
    a, b = all_keys[0], all_keys[1]
    with make(corpus_files, tmp_path / "spill") as cache:
        cache.get(a)
        assert packed_records(cache.get(a)) is not None  # the second touch packs it
        cache.get(b)  # capacity 1: a goes to the spill
        with np.load(tmp_path / "spill" / "rg-0-0.npz") as npz:
            assert npz.files == [RECORDS]
        got = cache.get(a)
        c = cache.counters()
        raw, _ = packed_records(got)
        assert_same(got, reference[a])
        assert list(got) == list(reference[a]) and all(not arr.flags.writeable for arr in got.values())
        assert not raw.flags.writeable and raw.flags.owndata
        assert packed_records(cache.get(a))[0] is raw, "a spill hit is not packed again"
    assert c["ssd_hits"] == 1 and c["decodes"] == 2
    assert c["ssd_bytes_read"] == sum(arr.nbytes for arr in reference[a].values())


def test_bytes_moved_counts_what_the_spill_reads_back_beside_what_is_decoded(
    corpus_files, all_keys, reference, tmp_path
):
    """A policy that thrashes its spill decodes little and still reads a lot: bytes_moved sees both."""
    a, b = all_keys[0], all_keys[1]
    size = {k: sum(v.nbytes for v in reference[k].values()) for k in (a, b)}
    with make(corpus_files, tmp_path / "spill") as cache:
        for key in (a, b, a, b, a):  # capacity 1: every access after the first two is read back from the spill
            cache.get(key)
        c = cache.counters()
    assert c["decodes"] == 2 and c["bytes_loaded"] == size[a] + size[b]
    assert c["ssd_hits"] == 3 and c["ssd_bytes_read"] == 2 * size[a] + size[b]
    assert c["bytes_moved"] == c["bytes_loaded"] + c["ssd_bytes_read"]
    with cache_of(corpus_files, COLUMNS, spill=False, capacity=1, memory_probe=Probe()) as plain:
        assert plain.counters()["ssd_bytes_read"] == 0 and plain.counters()["bytes_moved"] == 0


def _corrupt(path, kind):
    if kind == "deleted":
        path.unlink()
    elif kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        path.write_bytes(random.Random(0).randbytes(path.stat().st_size))
    elif kind == "pickle":
        with np.load(path) as npz:
            arrays = {name: npz[name] for name in npz.files}
        arrays["label"] = np.array([object(), {"x": 1}], dtype=object)  # needs pickle to load
        np.savez(path, **arrays)
    elif kind == "other_values":
        with np.load(path) as npz:
            arrays = {name: npz[name] for name in npz.files}
        name = "features" if "features" in arrays else RECORDS  # a packed row group's one member
        arrays[name] = arrays[name] + arrays[name].dtype.type(1)  # a valid npz, same shapes and size
        np.savez(path, **arrays)


@pytest.mark.parametrize("touches", [1, 2], ids=["columns", "packed"])
@pytest.mark.parametrize("same_size", [False, True], ids=["as_is", "size_matched"])
@pytest.mark.parametrize("kind", ["deleted", "truncated", "garbage", "pickle", "other_values"])
def test_corrupt_spill_is_detected_and_redecoded(kind, same_size, touches, corpus_files, all_keys, reference, tmp_path):
    a, b = all_keys[0], all_keys[1]
    with make(corpus_files, tmp_path / "spill") as cache:
        for _ in range(touches):  # touched twice, the row group is packed row-major and spilled as one buffer
            cache.get(a)
        cache.get(b)
        path = tmp_path / "spill" / "rg-0-0.npz"
        _corrupt(path, kind)
        if same_size and path.exists():
            # Defeat the cheap size check so np.load and the checksums are what catch it.
            store = cache._spill
            store._index[a] = dataclasses.replace(store._index[a], size=path.stat().st_size)
        got = cache.get(a)
        assert_same(got, reference[a])
        c = cache.counters()
        assert c["spill_errors"] == 1 and c["ssd_hits"] == 0 and c["decodes"] == 3
        assert not path.exists(), "the bad file is deleted"
        assert a not in cache._spill
        assert any("unreadable or altered" in m for m in cache.diagnose())


def test_estimate_bounds_the_real_file_size(reference):
    for arrays in list(reference.values())[:5]:
        for cols in (COLUMNS, ["features"], ["side", "terminal"]):
            buf = io.BytesIO()
            sub = {c: arrays[c] for c in cols}
            np.savez(buf, **sub)
            assert len(buf.getvalue()) <= estimate_bytes(sub)


def test_budget_is_never_exceeded(corpus_files, all_keys, reference, tmp_path):
    one = max(estimate_bytes(arrays) for arrays in reference.values())
    budget = int(3.5 * one)
    rng = random.Random(3)
    spill_dir = tmp_path / "spill"
    with make(corpus_files, spill_dir, capacity=2, spill_budget_bytes=budget) as cache:
        for _ in range(150):
            key = rng.choice(all_keys[:10])
            assert_same(cache.get(key), reference[key])
            assert spill_dir_bytes(spill_dir) <= budget
            assert cache.counters()["ssd_bytes"] <= budget
        c = cache.counters()
    assert c["spill_dropped"] > 0 and c["ssd_hits"] > 0


def test_a_file_larger_than_the_budget_is_not_written(corpus_files, all_keys, tmp_path):
    with make(corpus_files, tmp_path / "spill", spill_budget_bytes=4096) as cache:
        for key in all_keys[:4]:
            cache.get(key)
        assert [p.name for p in (tmp_path / "spill").iterdir()] == [MARKER]
        c = cache.counters()
    assert c["ssd_spills"] == 0 and c["spill_skipped"] == 3


def test_plan_ranks_drop_the_furthest_and_never_a_sooner_one(tmp_path):
    arrays = {"x": np.arange(1000, dtype=np.int64)}
    store = SpillStore(tmp_path / "s", 2 * estimate_bytes(arrays))
    try:
        assert store.put("a", arrays, rank=10, ranks={})
        assert store.put("b", arrays, rank=5, ranks={"a": 10})
        # Full. c (next use 7) may push out a (10) but not b (5).
        assert store.put("c", arrays, rank=7, ranks={"a": 10, "b": 5})
        assert sorted(store.keys()) == ["b", "c"]
        # d is needed after everything on disk: it is the one not written.
        assert not store.put("d", arrays, rank=20, ranks={"b": 5, "c": 7})
        assert sorted(store.keys()) == ["b", "c"]
        # Without ranks: oldest first.
        assert store.put("e", arrays)
        assert sorted(store.keys()) == ["c", "e"]
        assert np.array_equal(store.load("c")["x"], arrays["x"])
    finally:
        store.close()


def _fill(cache, keys):
    for key in keys:
        cache.get(key)
    assert len(list(cache.spill_dir.glob("*.npz"))) == len(keys) - 1


def test_spill_dir_removed_on_close(corpus_files, all_keys, tmp_path):
    cache = make(corpus_files, tmp_path / "spill")
    _fill(cache, all_keys[:3])
    cache.close()
    assert not (tmp_path / "spill").exists()
    cache.close()  # idempotent


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_spill_dir_removed_when_a_with_block_raises(exc, corpus_files, all_keys, tmp_path):
    with pytest.raises(exc), make(corpus_files, tmp_path / "spill") as cache:
        _fill(cache, all_keys[:3])
        raise exc()
    assert not (tmp_path / "spill").exists()


def test_spill_dir_removed_when_close_is_forgotten(corpus_files, all_keys, tmp_path):
    cache = make(corpus_files, tmp_path / "spill")
    _fill(cache, all_keys[:3])
    del cache
    gc.collect()
    assert not (tmp_path / "spill").exists()


def test_default_spill_dir_is_private_and_removed(corpus_files, all_keys):
    cache = cache_of(corpus_files, COLUMNS, policy="lru", capacity=1, spill=True, memory_probe=Probe())
    spill_dir = cache.spill_dir
    _fill(cache, all_keys[:2])
    cache.close()
    assert not spill_dir.exists()


def test_stale_files_of_a_killed_run_are_removed(corpus_files, all_keys, reference, tmp_path):
    spill_dir = tmp_path / "spill"
    killed = SpillStore(spill_dir, 2**30)
    assert killed.put(all_keys[0], reference[all_keys[0]])
    killed._finalizer.detach()  # as if the process died before cleanup
    (spill_dir / ".rg-0-1.deadbeef.tmp").write_bytes(b"half a file")
    del killed
    with make(corpus_files, spill_dir) as cache:
        assert sorted(p.name for p in spill_dir.iterdir()) == [MARKER]
        assert_same(cache.get(all_keys[0]), reference[all_keys[0]])
        assert cache.counters()["ssd_hits"] == 0


def user_files(spill_dir, kind):
    """What a user (or an older tool) left where a spill dir goes; {name: bytes} of the regular files."""
    import os

    spill_dir.mkdir(parents=True)
    if kind == "marked-dead-owner-and-a-user-file":
        (spill_dir / MARKER).write_text("{}")  # a dead run's marker: its lock is free
        (spill_dir / "rg-0-3.npz").write_bytes(b"a dead run's row group")
        (spill_dir / "notes.txt").write_bytes(b"mine")
        return {"notes.txt": b"mine", "rg-0-3.npz": b"a dead run's row group"}
    if kind == "fifo":
        os.mkfifo(spill_dir / "rg-0-5.npz")
        return {}
    if kind == "link":
        (spill_dir.parent / "elsewhere.npz").write_bytes(b"kept")
        (spill_dir / "rg-0-6.npz").symlink_to(spill_dir.parent / "elsewhere.npz")
        return {}
    (spill_dir / "rg-0-3.npz").write_bytes(b"looks like spill, is not ours")  # no marker: a user's .npz
    (spill_dir / ".rg-0-4.abc.tmp").write_bytes(b"old")
    (spill_dir / "embeddings.npz").write_bytes(b"a user's array")
    return {
        "rg-0-3.npz": b"looks like spill, is not ours",
        ".rg-0-4.abc.tmp": b"old",
        "embeddings.npz": b"a user's array",
    }


@pytest.mark.parametrize("kind", ["unmarked-npz", "marked-dead-owner-and-a-user-file", "fifo", "link"])
def test_files_without_the_marker_are_never_deleted_whatever_their_names(kind, corpus_files, tmp_path):
    """Only a marked dir is emptied, and only of regular files named as the store names them: a user's
    .npz (even one named rg-*.npz) in an unmarked dir, a user's file beside a dead run's spill, a FIFO or
    a link are refused in one line (NotOurs, a ConfigError) and nothing is deleted."""
    from tcgexp.errors import ConfigError

    spill_dir = tmp_path / ".cache_spill" / "val"
    files = user_files(spill_dir, kind)
    before = sorted(p.name for p in spill_dir.iterdir())
    with pytest.raises(ConfigError, match=r"spill dir .* holds files tcgexp did not write") as err:
        make(corpus_files, spill_dir)
    assert "\n" not in str(err.value) and str(spill_dir) in str(err.value)
    assert sorted(p.name for p in spill_dir.iterdir()) == before
    assert {n: (spill_dir / n).read_bytes() for n in files} == files
    if kind == "link":
        assert (tmp_path / ".cache_spill" / "elsewhere.npz").read_bytes() == b"kept"


def test_a_file_where_the_spill_dir_goes_is_one_line_and_kept(corpus_files, tmp_path):
    from tcgexp.errors import ConfigError

    (tmp_path / "val").write_bytes(b"a user's file")
    with pytest.raises(ConfigError, match="is not a folder tcgexp made"):
        make(corpus_files, tmp_path / "val")
    assert (tmp_path / "val").read_bytes() == b"a user's file"


def test_a_foreign_directory_is_never_wiped(corpus_files, tmp_path):
    spill_dir = tmp_path / "run"
    spill_dir.mkdir()
    (spill_dir / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ValueError, match="refusing to delete any of them"):
        make(corpus_files, spill_dir)
    assert (spill_dir / "model.safetensors").read_bytes() == b"weights"


def test_disk_full_warns_once_and_stops_spilling(corpus_files, all_keys, reference, tmp_path, monkeypatch):
    import tcgexp.cache.spill as spill_mod

    def disk_full(fh, **arrays):
        fh.write(b"PK\x03\x04 half an archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spill_mod.np, "savez", disk_full)
    spill_dir = tmp_path / "spill"
    with make(corpus_files, spill_dir) as cache:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for key in all_keys[:5]:
                assert_same(cache.get(key), reference[key])
        runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(runtime) == 1 and "disabled" in runtime[0]
        assert sorted(p.name for p in spill_dir.iterdir()) == [MARKER], "no partial file left"
        assert_same(cache.get(all_keys[0]), reference[all_keys[0]])  # re-decoded
        c = cache.counters()
        assert c["spill_disabled"] == 1 and c["ssd_spills"] == 0 and c["evictions"] == 5
        assert any("turned off after a write error (the disk is full)" in m for m in cache.diagnose())


@pytest.mark.parametrize("capacity", [1, 2, 3], ids=lambda c: f"capacity{c}")
def test_plan_keeps_what_it_bypasses_or_evicts_for_a_later_use_on_the_spill(
    capacity, corpus_files, all_keys, reference, tmp_path
):
    """Two epochs' trace in view (the trainer hands the plan policy this epoch's and the next's): every row group
    is decoded once; in the second epoch what RAM does not hold is read back from the spill, bypassed keys too
    (before, a bypassed key was dropped and decoded again). RAM's choices stay Belady's over the whole trace."""
    keys = all_keys[:6]
    rng = random.Random(capacity)
    epochs = [[(k,) for k in rng.sample(keys, len(keys))] for _ in range(2)]
    with make(corpus_files, tmp_path / "spill", policy="plan", capacity=capacity) as cache:
        cache.set_trace(epochs[0] + epochs[1])
        for t, (key,) in enumerate(epochs[0]):
            assert_same(cache.get(key, t=t), reference[key])
        cache.set_trace(epochs[1])  # the next epoch: its own trace (and the one after it, were there one)
        for t, (key,) in enumerate(epochs[1]):
            assert_same(cache.get(key, t=t), reference[key])
        c = cache.counters()
    assert c["decodes"] == len(keys), c  # each row group decoded once, in the first epoch
    assert c["ssd_hits"] == c["misses"] - len(keys), c  # every later miss read back from the spill
    assert c["hits"] == belady_hits(epochs[0] + epochs[1], capacity), c


def test_a_row_group_on_its_way_to_the_spill_is_not_queued_again(corpus_files, all_keys, reference, tmp_path):
    """Two loader workers can each drop the same row group while its first spill write is in flight. A second write
    was queued, refused by the store at once, and its flush then cleared the in-flight entry under the first: a miss
    in between found the row group nowhere and decoded it again (CI, 2026-12-05: a 3-epoch ``cache=plan`` run with
    ``loader.workers=2`` decoded one twice in 8 of 10 tries). Now it is queued once and served from memory till written."""
    key = all_keys[0]
    with make(corpus_files, tmp_path / "spill", policy="plan", capacity=1) as cache:
        cache.set_trace([(key,), (key,)])  # read later: worth keeping
        tiers, first, second = cache._tiers, [], []
        with cache._lock:
            tiers._queue_spill(key, reference[key], first)
            tiers._queue_spill(key, reference[key], second)  # the other worker, while the first is on its way
        assert len(first) == 1 and second == []
        tiers.flush(second)
        assert key in tiers.spilling  # still in memory for a miss until its write is done
        tiers.flush(first)
        assert key not in tiers.spilling and key in tiers.spill
        assert_same(cache.get(key, t=0), reference[key])
        assert cache.counters()["decodes"] == 0 and cache.counters()["ssd_hits"] == 1
