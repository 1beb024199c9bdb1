"""The corpus pipeline: schema, layout, split, idempotence, resume, determinism."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from tcgexp.data import BuildRefused
from tcgexp.data.lanecheck import check_lanes
from tcgexp.data.replay import DayZip
from tcgexp.data.schema import COLUMN_ORDER, arrow_schema, to_numpy
from tcgexp.games import sim
from tests.conftest import make_corpus


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    corpus = make_corpus(tmp_path_factory.mktemp("corpus") / "data", "dataset.days=2")
    outcome = corpus.build()
    return corpus, outcome


def read_day(corpus, date):
    return to_numpy(pq.read_table(corpus.paths(date).parquet))


def test_first_build_builds_every_day(built):
    corpus, outcome = built
    assert outcome == {d: "built" for d in corpus.dates}
    for d in corpus.dates:
        p = corpus.paths(d)
        assert p.zip.exists() and p.parquet.exists() and p.manifest.exists()
        assert not p.work.exists(), "shards are dropped once the day is finished"


def test_schema_and_dtypes(built):
    corpus, _ = built
    pf = pq.ParquetFile(corpus.files[0])
    assert pf.schema_arrow.equals(arrow_schema(sim.FEATURE_DIM, sim.ACTION_DIM), check_metadata=False)
    cols = read_day(corpus, corpus.dates[0])
    assert list(cols) == COLUMN_ORDER
    expect = {
        "episode_id": np.int64,
        "side": np.int8,
        "step_id": np.int32,
        "decision_id": np.int64,
        "substep": np.int16,
        "new_episode": np.bool_,
        "terminal": np.bool_,
        "is_self": np.bool_,
        "label": np.int32,
        "would_ko_valid": np.bool_,
        "aux_ko": np.float32,
        "aux_prize_delta": np.float32,
        "aux_terminal": np.float32,
        "aux_return": np.float32,
        "aux_valid": np.bool_,
        "features": np.float32,
        "action_mask": np.bool_,
        "would_ko": np.float32,
    }
    for name, dtype in expect.items():
        assert cols[name].dtype == dtype, name
    n = len(cols["label"])
    assert cols["features"].shape == (n, sim.FEATURE_DIM)
    assert cols["action_mask"].shape == cols["would_ko"].shape == (n, sim.ACTION_DIM)
    assert np.isfinite(cols["features"]).all()
    assert cols["action_mask"][np.arange(n), cols["label"]].all(), "every label is legal"


def test_whole_episodes_per_row_group_and_split_by_episode(built):
    corpus, _ = built
    for date in corpus.dates:
        m = corpus.manifests[date]
        pf = pq.ParquetFile(corpus.paths(date).parquet)
        assert pf.metadata.num_row_groups == len(m["row_groups"]) > 1
        owner: dict[int, int] = {}
        val = set(m["split"]["val_episodes"])
        assert 0 < len(val) < m["episodes"]
        for rg in m["row_groups"]:
            ep = pf.read_row_group(rg["index"], columns=["episode_id"]).column(0).to_numpy()
            assert (np.diff(ep) >= 0).all() and len(np.unique(ep)) == rg["episodes"]
            for e in np.unique(ep):
                assert owner.setdefault(int(e), rg["index"]) == rg["index"], f"episode {e} spans row groups"
            in_val = np.isin(ep, list(val))
            assert in_val.all() if rg["split"] == "val" else not in_val.any(), "a row group is all train or all val"
        assert m["split"]["train_rows"] + m["split"]["val_rows"] == m["rows"] == pf.metadata.num_rows


def test_step_id_contiguous_and_multiselect_rows_share_decision(built):
    corpus, _ = built
    cols = read_day(corpus, corpus.dates[0])
    check_lanes(cols["episode_id"], cols["side"], cols["step_id"], cols["decision_id"])
    multi = cols["substep"] > 0
    assert multi.any(), "the corpus holds multi-select decisions"
    for i in np.flatnonzero(multi):
        assert cols["decision_id"][i] == cols["decision_id"][i - 1]
        assert cols["step_id"][i] == cols["step_id"][i - 1]
        assert cols["substep"][i] == cols["substep"][i - 1] + 1
    # lanes: both sides of every episode, step ids 0..n-1 with no gaps
    for e, s in {(int(e), int(s)) for e, s in zip(cols["episode_id"], cols["side"])}:
        steps = np.unique(cols["step_id"][(cols["episode_id"] == e) & (cols["side"] == s)])
        assert (steps == np.arange(len(steps))).all()


def test_would_ko_valid_zeros_and_failures_counted_apart(built):
    corpus, _ = built
    for date in corpus.dates:
        m, cols = corpus.manifests[date]["would_ko"], read_day(corpus, date)
        valid = cols["would_ko_valid"]
        assert m["valid_rows"] == int(valid.sum())
        assert m["valid_zero_rows"] == int((valid & (cols["would_ko"].max(axis=1) == 0)).sum())
        assert m["valid_zero_rows"] > 0 and m["failed_rows"] > 0 and m["failed_trials"] > 0
        assert m["eligible"] >= m["computed"] >= m["valid_rows"] + m["failed_rows"] - 0
        assert m["computed"] == m["valid_rows"] + m["failed_rows"]


def test_catalog_has_one_row_per_day(built):
    corpus, _ = built
    rows = corpus.catalog.all()
    assert [r["date"] for r in rows] == corpus.dates
    for r in rows:
        m = corpus.manifests[r["date"]]
        assert (r["rows"], r["fingerprint"], r["sha256"]) == (m["rows"], m["fingerprint"], m["sha256"])


def test_second_build_touches_nothing(built):
    corpus, _ = built
    root = corpus.root
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*") if p.is_file()}
    again = make_corpus(root, "dataset.days=2")
    assert again.build() == {d: "validated" for d in corpus.dates}
    assert again.encoded == {d: [] for d in corpus.dates}
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*") if p.is_file()}
    assert after == before


def test_full_verify_passes_on_a_good_day(built):
    corpus, _ = built
    assert make_corpus(corpus.root, "dataset.days=2", "dataset.verify=full").build() == {
        d: "validated" for d in corpus.dates
    }


class Interrupt(Exception):
    pass


def interrupt_after(n_encoded: int):
    seen = []

    def progress(stage, done, total):
        if stage.endswith("encode"):
            seen.append(done)
            if len(seen) > n_encoded:
                raise Interrupt

    return progress


def test_interrupted_build_resumes_only_missing_shards(tmp_path):
    root = tmp_path / "data"
    corpus = make_corpus(root)
    date = corpus.dates[0]
    with pytest.raises(Interrupt):
        corpus.build(progress=interrupt_after(3))
    work = corpus.paths(date).work
    done = sorted(work.glob("*.done"))
    assert [d.name for d in done] == ["shard_00000.done", "shard_00001.done", "shard_00002.done"]
    done[1].unlink()  # as if killed after the shard's Parquet landed but before its marker
    n_shards = len(DayZip(corpus.paths(date).zip).members)
    resumed = make_corpus(root)
    assert resumed.build() == {date: "built"}
    assert resumed.encoded[date] == [1, *range(3, n_shards)], "only shards without .done were redone"
    fresh = make_corpus(tmp_path / "fresh")
    fresh.build()
    assert pq.read_table(fresh.files[0]).equals(pq.read_table(resumed.files[0]))


def test_changed_fingerprint_is_refused_on_resume(tmp_path):
    root = tmp_path / "data"
    with pytest.raises(Interrupt):
        make_corpus(root).build(progress=interrupt_after(2))
    with pytest.raises(BuildRefused) as err:
        make_corpus(root, "dataset.would_ko=false").build()
    assert "resume.json" in str(err.value) and "would_ko" in str(err.value)
    assert len(list(make_corpus(root).paths("2026-07-27").work.glob("*.done"))) == 2, "nothing was lost"


def test_finished_day_is_never_rebuilt_under_another_config(built):
    corpus, _ = built
    before = corpus.files[0].stat().st_mtime_ns
    with pytest.raises(BuildRefused) as err:
        make_corpus(corpus.root, "dataset.days=2", "dataset.row_group_rows=64").build()
    assert "manifest.json" in str(err.value) and "row_group_rows" in str(err.value)
    assert corpus.files[0].stat().st_mtime_ns == before


def test_same_seed_same_content_other_seed_differs(tmp_path, built):
    corpus, _ = built
    again = make_corpus(tmp_path / "again")
    again.build()
    assert pq.read_table(again.files[0]).equals(pq.read_table(corpus.files[0]))
    assert (
        json.loads(again.paths(again.dates[0]).manifest.read_text())["sha256"]
        == corpus.manifests[corpus.dates[0]]["sha256"]
    )
    other = make_corpus(tmp_path / "other", "dataset.seed=1")
    other.build()
    assert not pq.read_table(other.files[0]).equals(pq.read_table(corpus.files[0]))


def test_parallel_build_equals_serial(tmp_path, built):
    corpus, _ = built
    par = make_corpus(tmp_path / "par", "dataset.workers=2")
    par.build()
    assert pq.read_table(par.files[0]).equals(pq.read_table(corpus.files[0]))


def test_clean_derived_refused_while_zip_missing(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    corpus.build()
    p = corpus.paths(corpus.dates[0])
    p.zip.rename(tmp_path / "moved.zip")
    with pytest.raises(BuildRefused) as err:
        corpus.clean_derived(corpus.dates[0])
    assert str(p.zip) in str(err.value)
    assert p.parquet.exists() and p.manifest.exists()
    (tmp_path / "moved.zip").rename(p.zip)
    corpus.clean_derived(corpus.dates[0])
    assert not p.parquet.exists() and corpus.catalog.get(corpus.dates[0]) is None
    assert make_corpus(tmp_path / "data").build() == {corpus.dates[0]: "built"}, "rebuilt from the ZIP"
