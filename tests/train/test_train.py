"""train(cfg) end to end on a tiny real corpus: accounting, outputs, resume, determinism.

The outputs, bit-exact resume (on either step path, and switching paths) and the cache's invariance hold on
both games (``GAMES``): the built-in simulator's tiny demo corpus and the real game's (cabt_demo), whose
model has the option head."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from tcgexp.learn.errors import ScheduleError
from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.lifecycle.ckpt_files import find
from tcgexp.train import train
from tests.conftest import assert_continued
from tests.train.conftest import GAME_DATA, GAMES, TINY_TRAIN, compose_config, game_root


def weights(result) -> dict[str, bytes]:
    return {k: np.array(v).tobytes() for k, v in tree_flatten(result["model"].parameters())}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("train_data")


@pytest.fixture(scope="module", params=GAMES)
def game(request):
    return request.param


@pytest.fixture(scope="module")
def game_cfg(request, game, data_root):
    """compose(overrides...) for a tiny run on `game`'s corpus (its overrides last, so its days stay the fixture's)."""
    root = game_root(request, game, data_root)

    def make(*overrides: str):
        return compose_config(f"dataset.root={root}", *TINY_TRAIN, *overrides, *GAME_DATA[game])

    return make


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, game_cfg):
    """An uninterrupted 2-epoch run that the other runs are compared with."""
    run_dir = tmp_path_factory.mktemp("baseline")
    return train(game_cfg(), run_dir=run_dir), run_dir


def test_outputs_of_a_run(baseline, game):
    result, run_dir = baseline
    on_disk = json.loads((run_dir / "result.json").read_text())
    metrics = result["model"].metrics
    assert (game == "cabt") == ("stop" in metrics), "the real game's model has the option head and its stop head"
    for part in ("train", "val"):
        assert set(metrics) <= set(on_disk["history"][-1][part]), part
    assert on_disk["planned"]["microbatches"] == on_disk["processed"]["microbatches"] > 0
    assert on_disk["planned"]["optimizer_steps"] == on_disk["processed"]["optimizer_steps"]
    assert set(on_disk["cache"]) == {"train", "val"}
    for counters in on_disk["cache"].values():
        assert counters["hits"] + counters["misses"] == counters["accesses"]
    for key in ("wall_seconds", "rows_per_second", "data_stall_seconds", "data_stall_share", "final", "best"):
        assert key in on_disk
    final = on_disk["final"]
    for key in ("loss", "policy", "accuracy", "aux_ko", "policy_early", "policy_late", "accuracy_early", *metrics):
        assert np.isfinite(final[key]), key
    for name in ("best", "latest", "epoch_0001", "epoch_0002"):
        assert sorted(p.name for p in (run_dir / "checkpoints" / name).iterdir()) == sorted(
            [*ckpt.FILES, ckpt.CHECKSUMS]
        )
    assert not (run_dir / ".cache_spill").exists()


@pytest.mark.parametrize("batch, accum", [(64, 1), (64, 3), (96, 2), (48, 5)], ids=lambda v: str(v))
def test_exact_step_accounting(train_cfg, data_root, tmp_path, batch, accum):
    r = train(
        train_cfg(f"tbptt.batch_size={batch}", f"tbptt.accum_steps={accum}", "trainer.epochs=1", data=data_root),
        run_dir=tmp_path / "run",
    )
    mb = r["planned"]["per_epoch_microbatches"]
    assert r["processed"]["microbatches"] == sum(mb)
    assert r["processed"]["optimizer_steps"] == r["planned"]["optimizer_steps"] == sum(-(-m // accum) for m in mb)


def test_epoch_snapshots_every_n_and_final_always(train_cfg, data_root, tmp_path):
    train(train_cfg("trainer.epochs=3", "checkpoint.every_epochs=2", data=data_root), run_dir=tmp_path / "r")
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert names == ["best", "epoch_0002", "epoch_0003", "latest"]


@pytest.mark.parametrize("where", ["mid-epoch-0", "in-epoch-1"])
def test_resume_is_bit_exact(baseline, game_cfg, tmp_path, where, step_path):
    """On either step path (trainer.kernels), against the baseline (run with the default, auto)."""
    full, _ = baseline
    first_epoch = full["planned"]["per_epoch_microbatches"][0]  # optimizer steps too (accum_steps=1)
    stop_at = max(1, first_epoch // 2) if where == "mid-epoch-0" else first_epoch + 2
    assert stop_at < full["processed"]["optimizer_steps"]
    first = train(game_cfg(f"trainer.max_steps={stop_at}", f"trainer.kernels={step_path}"), run_dir=tmp_path / "a")
    assert first["stopped_early"] and first["processed"]["optimizer_steps"] == stop_at
    state = json.loads((tmp_path / "a" / "checkpoints" / "latest" / "state.json").read_text())
    assert state["progress"]["opt_steps"] == stop_at and state["kernels"] == step_path
    resumed = train(game_cfg(f"resume={tmp_path / 'a'}", f"trainer.kernels={step_path}"), run_dir=tmp_path / "b")
    assert resumed["processed"]["optimizer_steps"] == full["processed"]["optimizer_steps"]
    assert_continued(resumed, stop_at)
    assert weights(resumed) == weights(full), "final weights equal an uninterrupted run's, bit for bit"


@pytest.mark.parametrize(
    "first, then", [("pure", "fused"), ("fused", "pure")], ids=["pure-then-fused", "fused-then-pure"]
)
def test_a_resume_may_switch_the_step_path(baseline, game_cfg, tmp_path, first, then):
    """The two paths are bit-identical, so trainer.kernels is not pinned: a run stopped on one resumes on the other."""
    from tcgexp.kernels import load

    if load()[0] is None:
        pytest.skip(f"tcgexp's kernels cannot run here: {load()[1]}")
    full, _ = baseline
    train(game_cfg("trainer.max_steps=7", f"trainer.kernels={first}"), run_dir=tmp_path / "a")
    resumed = train(game_cfg(f"resume={tmp_path / 'a'}", f"trainer.kernels={then}"), run_dir=tmp_path / "b")
    # result.json names both paths, in order (it used to name only the last segment's)
    assert resumed["kernels"] == f"{first}, then {then}" and weights(resumed) == weights(full)
    assert resumed["kernels_segments"] == [{"kernels": first, "from_step": 0}, {"kernels": then, "from_step": 7}]
    again = train(
        game_cfg(
            f"resume={tmp_path / 'b'}",
            "trainer.epochs=3",
            "scheduler.reset=true",
            f"trainer.kernels={then}",
        ),
        run_dir=tmp_path / "c",
    )
    assert again["kernels"] == f"{first}, then {then}", "a third segment on the same path adds no step"


@pytest.mark.parametrize(
    "overrides",
    [
        ["cache=off"],
        ["cache=plan"],
        ["cache=plan", "loader.workers=0"],
        ["cache=lru", "loader.workers=3"],
        ["cache=hot60", "cache.capacity=1"],
    ],
    ids=lambda o: ",".join(o),
)
def test_cache_policy_and_workers_never_change_the_weights(baseline, game_cfg, tmp_path, overrides, step_path):
    full, _ = baseline
    r = train(game_cfg(*overrides, f"trainer.kernels={step_path}"), run_dir=tmp_path / "r")
    assert r["kernels"] == step_path and weights(r) == weights(full)


@pytest.mark.parametrize("workers", [0, 2], ids=lambda w: f"workers{w}")
def test_a_plan_run_decodes_each_row_group_once_over_its_epochs(train_cfg, data_root, tmp_path, workers):
    """The plan policy sees this epoch's accesses and the next's: what it evicts or bypasses for a later epoch
    waits on the spill, so a 3-epoch run decodes each row group once and reads the rest back from the spill."""
    r = train(
        train_cfg("cache=plan", "cache.capacity=2", "trainer.epochs=3", f"loader.workers={workers}", data=data_root),
        run_dir=tmp_path / "r",
    )
    c = r["cache"]["train"]
    assert c["decodes"] == c["distinct_keys"] and c["ssd_hits"] > 0, c
    assert c["misses"] == c["decodes"] + c["ssd_hits"] + c["shared_misses"] + c["rescues"], c


def test_resume_past_the_scheduler_horizon_is_refused(train_cfg, data_root, tmp_path):
    train(train_cfg("trainer.epochs=1", data=data_root), run_dir=tmp_path / "a")
    with pytest.raises(ScheduleError, match="only 0 of its"):
        train(
            train_cfg("trainer.epochs=2", "scheduler.reset=false", f"resume={tmp_path / 'a'}", data=data_root),
            run_dir=tmp_path / "b",
        )
    # a new schedule for the extension is fine
    r = train(
        train_cfg("trainer.epochs=2", "scheduler.reset=true", f"resume={tmp_path / 'a'}", data=data_root),
        run_dir=tmp_path / "c",
    )
    assert r["processed"]["optimizer_steps"] == r["planned"]["optimizer_steps"]


def test_resume_on_other_data_or_model_is_refused(train_cfg, data_root, tmp_path):
    train(train_cfg("trainer.max_steps=3", data=data_root), run_dir=tmp_path / "a")
    with pytest.raises(CheckpointError, match="other data"):
        train(train_cfg("dataset.seed=9", f"resume={tmp_path / 'a'}", data=tmp_path / "other"), run_dir=tmp_path / "b")
    with pytest.raises(CheckpointError, match="tbptt.chunk"):
        train(train_cfg("tbptt.chunk=4", f"resume={tmp_path / 'a'}", data=data_root), run_dir=tmp_path / "c")


def test_latest_is_atomic_a_crash_mid_write_keeps_the_previous(train_cfg, data_root, tmp_path, monkeypatch):
    train(train_cfg("trainer.max_steps=4", data=data_root), run_dir=tmp_path / "a")
    latest = tmp_path / "a" / "checkpoints" / "latest"
    before = {p.name: p.read_bytes() for p in latest.iterdir()}
    calls = {"n": 0}
    real = mx.save_safetensors

    def dies_on_second_file(path, arrays):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("simulated crash while writing optimizer.safetensors")
        real(path, arrays)

    monkeypatch.setattr(mx, "save_safetensors", dies_on_second_file)
    with pytest.raises(OSError, match="simulated crash"):  # CheckpointWriteError is an OSError
        train(train_cfg("trainer.max_steps=8", f"resume={tmp_path / 'a'}", data=data_root), run_dir=tmp_path / "a")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in latest.iterdir()} == before
    assert find(str(tmp_path / "a")) == latest
    r = train(train_cfg(f"resume={tmp_path / 'a'}", data=data_root), run_dir=tmp_path / "b")
    assert r["processed"]["optimizer_steps"] == r["planned"]["optimizer_steps"]


def test_the_initial_weights_come_from_the_seed_alone(train_cfg, data_root, tmp_path):
    """Nothing draws from MLX's generator between the seed and the model's weights (measuring a model for
    the memory estimate builds one too, and would shift every run's initial weights)."""
    from rich.console import Console

    from tcgexp.config import build
    from tcgexp.games import sim
    from tcgexp.learn.blas import setup
    from tcgexp.lifecycle.distributed import World
    from tcgexp.train.learner import make_learner
    from tcgexp.train.parts import RunContext
    from tcgexp.train.run import prepare_data

    cfg = train_cfg("seed=7", data=data_root)
    data = prepare_data(cfg, World())
    learner = make_learner(cfg, data, RunContext(cfg, tmp_path, World(), Console(quiet=True), blas=setup()))
    mx.random.seed(7)
    alone = build(cfg.model)(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM)
    assert weights({"model": learner.model}) == weights({"model": alone})
