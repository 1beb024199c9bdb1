"""Bad input gets one clear error naming the file (and row group or lane); nothing built is lost."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from tcgexp.data import DataError
from tcgexp.data.lanecheck import check_lanes
from tests.conftest import make_corpus


@pytest.fixture
def day(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    corpus.build()
    return corpus, corpus.paths(corpus.dates[0])


def test_truncated_zip_names_the_file(day):
    corpus, p = day
    corpus.clean_derived(corpus.dates[0])
    data = p.zip.read_bytes()
    p.zip.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    assert str(p.zip) in str(err.value) and "unreadable" in str(err.value)
    assert p.zip.stat().st_size == len(data) // 2, "the source is never rewritten"


def test_corrupt_zip_member_fails_crc(day):
    corpus, p = day
    corpus.clean_derived(corpus.dates[0])
    data = bytearray(p.zip.read_bytes())
    with zipfile.ZipFile(p.zip) as zf:
        info = zf.getinfo("shard_00001.jsonl")
    at = info.header_offset + 30 + len(info.filename) + 8  # inside the member's compressed bytes
    data[at] ^= 0xFF
    p.zip.write_bytes(bytes(data))
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    assert str(p.zip) in str(err.value)


def rewrite_zip(path, edit):
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members = edit(members)
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)


def test_illegal_replay_action_names_file_member_and_episode(day):
    corpus, p = day
    corpus.clean_derived(corpus.dates[0])

    def edit(members):
        lines = members["shard_00002.jsonl"].decode().splitlines()
        rec = json.loads(lines[1])
        rec["actions"] = rec["actions"][: len(rec["actions"]) // 2]  # the game cannot end like this
        lines[1] = json.dumps(rec)
        members["shard_00002.jsonl"] = ("\n".join(lines) + "\n").encode()
        return members

    rewrite_zip(p.zip, edit)
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    msg = str(err.value)
    assert str(p.zip) in msg and "shard_00002.jsonl" in msg
    with zipfile.ZipFile(p.zip) as zf:
        ep = json.loads(zf.read("shard_00002.jsonl").decode().splitlines()[1])["episode_id"]
    assert str(ep) in msg


def test_zip_from_other_settings_is_refused_not_replaced(day):
    corpus, p = day
    corpus.clean_derived(corpus.dates[0])
    before = p.zip.read_bytes()
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root, "dataset.seed=5").build()
    assert str(p.zip) in str(err.value) and "seed" in str(err.value)
    assert p.zip.read_bytes() == before


def test_truncated_parquet_names_the_file(day):
    corpus, p = day
    data = p.parquet.read_bytes()
    p.parquet.write_bytes(data[:-100])
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    assert str(p.parquet) in str(err.value) and "truncated" in str(err.value)
    assert p.manifest.exists() and p.zip.exists(), "nothing else is touched"


def test_flipped_bytes_caught_by_full_verify_naming_file(day):
    corpus, p = day
    data = bytearray(p.parquet.read_bytes())
    data[len(data) // 3] ^= 0x55
    p.parquet.write_bytes(bytes(data))
    make_corpus(corpus.root).build()  # quick verify reads metadata only
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root, "dataset.verify=full").build()
    assert str(p.parquet) in str(err.value)


def test_manifest_disagreeing_with_file(day):
    corpus, p = day
    m = json.loads(p.manifest.read_text())
    m["row_groups"][1]["rows"] += 1
    p.manifest.write_text(json.dumps(m))
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    assert str(p.parquet) in str(err.value) and "row group 1" in str(err.value)


def test_unreadable_manifest(day):
    corpus, p = day
    p.manifest.write_text("{not json")
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    assert str(p.manifest) in str(err.value)


def test_catalog_row_disagreeing_with_manifest(day):
    corpus, _p = day
    row = corpus.catalog.get(corpus.dates[0])
    corpus.catalog.put({**row, "rows": row["rows"] + 7})
    with pytest.raises(DataError) as err:
        make_corpus(corpus.root).build()
    assert "catalog.sqlite" in str(err.value) and corpus.dates[0] in str(err.value)


@pytest.mark.parametrize(
    "steps, what",
    [
        ([0, 1, 2, 1], "repeats non-contiguously"),
        ([0, 1, 3], "jumps"),
        ([1, 2], "starts at step_id 1"),
    ],
    ids=["repeat", "gap", "bad-start"],
)
def test_broken_lane_names_file_row_group_and_lane(steps, what):
    n = len(steps)
    ep = np.full(n + 2, 7, np.int64)
    side = np.array([0] * n + [1, 1], np.int8)
    step = np.array(steps + [0, 1], np.int32)
    with pytest.raises(DataError) as err:
        check_lanes(ep, side, step, path="day.parquet", row_group=3)
    msg = str(err.value)
    assert "day.parquet" in msg and "row group 3" in msg and "episode_id=7, side=0" in msg and what in msg


def test_multiselect_repeat_is_fine_but_two_decisions_on_one_step_are_not():
    ep, side = np.zeros(4, np.int64), np.zeros(4, np.int8)
    step = np.array([0, 1, 1, 2], np.int32)
    check_lanes(ep, side, step, np.array([10, 11, 11, 12]))
    with pytest.raises(DataError, match="shared by two different decisions"):
        check_lanes(ep, side, step, np.array([10, 11, 99, 12]))
