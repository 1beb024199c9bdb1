"""Inputs that pass composition but cannot work are refused before any work, naming the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcgexp.data import DataError
from tcgexp.errors import ConfigError
from tcgexp.lifecycle.rundir import check
from tcgexp.memlimit import Room
from tcgexp.plan import LaneIndex
from tcgexp.train import train
from tcgexp.train.preflight import check_memory, model_bytes, planned_slots
from tests.conftest import compose_config, make_corpus, planner_of
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def cfg(root, *more):
    return compose_config(f"dataset.root={root}", *TINY_TRAIN, "trainer.epochs=1", *more)


@pytest.mark.parametrize(
    "override, key",
    [
        ("seed=-1", "seed"),
        ("seed=4294967296", "seed"),
        ("dataset.seed=-3", "dataset.seed"),
        ("dataset.rows_per_day=0", "dataset.rows_per_day"),
        ("dataset.max_turns=0", "dataset.max_turns"),
        ("dataset.compression=zip", "dataset.compression"),
        ("dataset.episodes_per_shard=0", "dataset.episodes_per_shard"),
        ("dataset.workers=-2", "dataset.workers"),
        ("dataset.val_fraction=1.0", "dataset.val_fraction"),
        ("dataset.start_date=2026-13-01", "dataset.start_date"),
        ("dataset.val_fraction=0.0", "dataset.val_fraction"),
        ("model.hidden=100000000", "model.hidden"),
    ],
    ids=lambda v: v if "=" in v else None,
)
def test_out_of_bounds_values_are_refused_before_any_work(override, key, tmp_path):
    with pytest.raises(ConfigError) as err:
        train(cfg(tmp_path / "data", override), run_dir=tmp_path / "run")
    msg = str(err.value)
    assert f"{key}=" in msg and "\n" not in msg
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists(), "refused before any work"


def test_the_memory_estimate_names_both_knobs_and_the_numbers(fresh_held):
    c = compose_config("model.hidden=4096", "tbptt.batch_size=100000")
    with pytest.raises(ConfigError) as err:
        check_memory(c, room=Room(2**30, "a test's limit"), held=fresh_held)
    msg = str(err.value)
    assert "model.hidden=4096" in msg and "tbptt.batch_size=100000" in msg and "may use 1.0 GiB (a test's limit)" in msg
    check_memory(compose_config(), room=Room(2**30, "x"), held=fresh_held)  # the default model fits in 1 GiB
    assert model_bytes(compose_config()) < 2**28


def test_a_chunk_longer_than_a_microbatch_holds_costs_no_more_memory(tmp_path, fresh_held):
    """A microbatch's lanes and decisions share the row budget: tbptt.chunk=100000 at the default
    batch size is accepted before any work, and after planning needs what chunk=1000 needs."""
    check_memory(compose_config("tbptt.chunk=100000"), room=Room(2**30, "x"), held=fresh_held)
    corpus = make_corpus(tmp_path / "data", "dataset.rows_per_day=3000", "dataset.row_group_rows=512", build_now=True)
    index = LaneIndex.of(corpus)
    slots = {c: planned_slots(planner_of(index, chunk=c)) for c in (1000, 100000)}
    assert slots[1000] == slots[100000] <= 256 * 256
    result = train(
        cfg(
            tmp_path / "data",
            "dataset.rows_per_day=3000",
            "dataset.row_group_rows=512",
            "tbptt.batch_size=256",
            "tbptt.chunk=100000",
        ),
        run_dir=tmp_path / "run",
    )
    assert result["status"] == "completed"


MEASURED = [
    [],
    ["tbptt.chunk=1000"],
    pytest.param(["model.hidden=256", "tbptt.accum_steps=2"], marks=pytest.mark.slow),
    pytest.param(["tbptt.enabled=false"], marks=pytest.mark.slow),
    pytest.param(["model.hidden=1024", "tbptt.batch_size=2048"], marks=pytest.mark.slow),
]


@pytest.mark.parametrize(
    "overrides", MEASURED, ids=["defaults", "chunk=1000", "hidden=256,accum=2", "tbptt-off", "hidden=1024,batch=2048"]
)
def test_the_estimate_bounds_the_measured_peak_with_headroom(tmp_path, overrides):
    """After planning, the estimate the run's check made (tcgexp.train.memneed) is at least 1.1 x the process's
    peak resident memory over a whole run (what a cgroup's OOM killer counts), and not so far above it that the
    check would refuse runs that fit (``python -m tcgexp.bench memory`` measures the wider grid)."""
    from tcgexp.bench.memory import measure

    got = measure(overrides, str(tmp_path / "data"), str(tmp_path / "run"))
    assert 1.10 <= got["estimate"] / got["peak"] <= 2.5, got


def test_the_data_app_applies_the_same_bounds(tmp_path):
    with pytest.raises(DataError, match=r"dataset\.seed=-1 is impossible"):
        make_corpus(tmp_path / "data", "dataset.seed=-1")


@pytest.mark.parametrize(
    "selection",
    [
        ["dataset.date_from=0001-01-01", "dataset.date_to=9999-12-31"],
        ["dataset.date_from=2020-01-01", "dataset.date_to=2029-12-31"],
        ["dataset.days=400"],
    ],
    ids=["all-of-time", "a-decade", "400-days"],
)
def test_a_huge_selection_is_one_short_line_before_any_work(selection, tmp_path):
    """Train refused 0001-01-01..9999-12-31 with a 43.8 MB line; any selection is counted, and listed short."""
    import time

    root = tmp_path / "data"
    make_corpus(root, *TINY_TRAIN, "dataset.days=2", build_now=True)
    before = sorted(p.name for p in (root / "bc_data").iterdir())
    t0 = time.monotonic()
    with pytest.raises(DataError) as err:
        train(cfg(root, *selection), run_dir=tmp_path / "run")
    assert time.monotonic() - t0 < 15
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 700, f"{len(msg)} characters"
    assert sorted(p.name for p in (root / "bc_data").iterdir()) == before, "no day built"


def test_a_corpus_whose_validation_split_is_empty_is_refused_before_the_first_step(tmp_path):
    # one episode: a 10 % share of it rounds to no validation episode
    with pytest.raises(ConfigError, match=r"validation split is empty.*dataset\.val_fraction") as err:
        train(cfg(tmp_path / "data", "dataset.rows_per_day=1"), run_dir=tmp_path / "run")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "result.json").exists()


@pytest.mark.parametrize("where", ["root", "home", "repo", "repo-subfolder-parent", "foreign"])
def test_a_run_dir_that_is_not_a_run_dir_is_refused(where, tmp_path):
    if where == "foreign":
        run_dir = tmp_path / "mine"
        run_dir.mkdir()
        (run_dir / "thesis.tex").write_text("precious")
    else:
        run_dir = {"root": Path("/"), "home": Path.home(), "repo": ROOT, "repo-subfolder-parent": ROOT.parent}[where]
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(ConfigError) as err:
        train(cfg(tmp_path / "data"), run_dir=run_dir)
    assert "hydra.run.dir=" in str(err.value) and str(run_dir) in str(err.value)
    assert sorted(p.name for p in run_dir.iterdir()) == before, "nothing written"
    assert not (tmp_path / "data").exists()


def test_a_dir_hydra_made_or_an_earlier_run_left_is_accepted(tmp_path):
    """Only Hydra's files for this job (.hydra/, the job log), or a folder marked as a run dir of ours,
    which an earlier run of ours left (tests/reliability/test_run_folders.py: a look-alike is refused)."""
    from tcgexp.lifecycle.rundir import mark

    made = tmp_path / "outputs" / "run"
    (made / ".hydra").mkdir(parents=True)
    (made / ".hydra" / "config.yaml").write_text("{}")
    (made / "train.log").write_text("")
    check(made)
    check(tmp_path / "not-yet")
    mark(made)
    (made / "checkpoints").mkdir()
    (made / "result.json").write_text("{}")
    check(made)
