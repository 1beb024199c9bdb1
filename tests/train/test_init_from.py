"""init_from=<run dir or checkpoint>: a new run starts from another run's weights, on its own data and schedule;
the lineage is recorded; a checkpoint of another network, or a damaged one, is refused in one line."""

from __future__ import annotations

import hashlib
import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from tcgexp.config import build
from tcgexp.errors import ConfigError
from tcgexp.games.registry import game, model_dims
from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.lifecycle.init_from import Parent
from tcgexp.train import train
from tests.conftest import CABT_DEMO
from tests.train.conftest import TINY_TRAIN, compose_config

ONE_EPOCH = [*TINY_TRAIN, "trainer.epochs=1"]
# a rate so small that no update moves a float32 weight: the run's final weights are the ones it started from
STILL = ["optimizer.lr=1e-30", "scheduler.warmup_steps=0", "optimizer.weight_decay=0"]


def cfg_at(root, *overrides: str):
    return compose_config(f"dataset.root={root}", *ONE_EPOCH, *overrides)


def weights(model) -> dict[str, bytes]:
    return {k: np.array(v).tobytes() for k, v in tree_flatten(model.parameters())}


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A finished one-epoch run on the built-in game: what the other runs start from."""
    base = tmp_path_factory.mktemp("init_from")
    result = train(cfg_at(base / "data"), run_dir=base / "a")
    return base, result


def test_a_run_starts_from_another_runs_weights_on_other_data(parent, tmp_path):
    base, first = parent
    r = train(cfg_at(tmp_path / "other", "dataset.seed=5", f"init_from={base / 'a'}", *STILL), run_dir=tmp_path / "b")
    assert weights(r["model"]) == weights(first["model"]), "the run did not start from init_from's weights"
    assert r["dates"] and not r["resumed_from"]
    assert r["processed"]["optimizer_steps"] == r["planned"]["optimizer_steps"], "a new schedule, from step 0"
    latest = base / "a" / "checkpoints" / "latest"
    on_disk = json.loads((tmp_path / "b" / "result.json").read_text())
    assert (
        on_disk["init_from"]["weights_sha256"]
        == hashlib.sha256((latest / "model.safetensors").read_bytes()).hexdigest()
    )
    assert on_disk["init_from"]["checkpoint"] == str(latest.resolve())
    assert on_disk["init_from"]["run_dir"] == str((base / "a").resolve())
    assert on_disk["init_from"]["dates"] == first["dates"]
    assert [e["checkpoint"] for e in on_disk["lineage"]] == [str(latest.resolve())]
    state = ckpt.read_state(tmp_path / "b" / "checkpoints" / "latest")
    assert state["lineage"] == on_disk["lineage"], "a checkpoint carries its lineage (the next init_from reads it)"
    assert state["network"]["game"] == "sim" and state["network"]["features"]


def test_the_lineage_reads_back_to_the_first_run(parent, tmp_path):
    base, _ = parent
    train(cfg_at(base / "data", f"init_from={base / 'a'}"), run_dir=tmp_path / "b")
    epoch = tmp_path / "b" / "checkpoints" / "epoch_0001"
    r = train(cfg_at(base / "data", f"init_from={epoch}"), run_dir=tmp_path / "c")
    assert [e["run_dir"] for e in r["lineage"]] == [str((base / "a").resolve()), str((tmp_path / "b").resolve())]
    assert r["init_from"]["checkpoint"] == str(epoch.resolve())


def test_a_resumed_run_keeps_its_lineage_and_its_parent(parent, tmp_path):
    base, _ = parent
    cut = train(cfg_at(base / "data", f"init_from={base / 'a'}", "trainer.max_steps=3"), run_dir=tmp_path / "b")
    assert cut["status"] == "stopped"
    r = train(cfg_at(base / "data", f"init_from={base / 'a'}", f"resume={tmp_path / 'b'}"), run_dir=tmp_path / "c")
    assert r["resumed_from"] and r["lineage"] == cut["lineage"]
    with pytest.raises(CheckpointError, match="init_from"):  # what the run computes from: not a resume's to change
        train(cfg_at(base / "data", f"init_from={tmp_path / 'c'}", f"resume={tmp_path / 'b'}"), run_dir=tmp_path / "d")


def test_init_optimizer_carries_the_moments_not_the_step(parent):
    base, _ = parent
    cfg = cfg_at(base / "data", f"init_from={base / 'a'}", "init_optimizer=true")
    model = build(cfg.model)(**model_dims(game("sim"), int(cfg.dataset.max_options)))
    optimizer = build(cfg.optimizer)(build(cfg.scheduler)(run_steps=10))
    optimizer.init(model.trainable_parameters())
    Parent.read(cfg.init_from).restore(model, optimizer, carry_optimizer=True)
    saved = mx.load(str(base / "a" / "checkpoints" / "latest" / "optimizer.safetensors"))
    now = dict(tree_flatten(optimizer.state))
    moments = [k for k in saved if k not in ("step", "learning_rate")]
    assert moments and all(np.array_equal(np.array(now[k]), np.array(saved[k])) for k in moments)
    assert int(now["step"].item()) == 0 and int(saved["step"].item()) > 0


@pytest.mark.parametrize(
    "override, said",
    [
        ("model.hidden=32", "model.hidden is 16 there, 32 here; run with model.hidden=16"),
        ("model.memory=false", "model.memory is True there, False here"),
    ],
    ids=["wider", "no-memory"],
)
def test_another_network_is_refused_before_anything_is_written(parent, tmp_path, override, said):
    base, _ = parent
    with pytest.raises(CheckpointError, match="init_from=.*the checkpoint's network is not this run's") as info:
        train(cfg_at(tmp_path / "data", override, f"init_from={base / 'a'}"), run_dir=tmp_path / "b")
    assert said in str(info.value)
    assert not (tmp_path / "data").exists() and not (tmp_path / "b" / "result.json").exists()


def resealed(src, dst, change):
    shutil.copytree(src, dst)
    state = json.loads((dst / "state.json").read_text())
    change(state)
    (dst / "state.json").write_text(json.dumps(state))
    ckpt.seal(dst)
    return dst


def test_features_that_mean_other_things_are_refused(parent, tmp_path):
    base, _ = parent
    other = resealed(
        base / "a" / "checkpoints" / "latest", tmp_path / "ck", lambda s: s["network"].update(features="0" * 64)
    )
    with pytest.raises(CheckpointError, match="feature columns meant other things"):
        train(cfg_at(base / "data", f"init_from={other}"), run_dir=tmp_path / "b")


def test_a_checkpoint_from_before_networks_were_recorded_is_read_from_its_config(parent, tmp_path):
    base, first = parent
    old = resealed(base / "a" / "checkpoints" / "latest", tmp_path / "ck", lambda s: s.pop("network"))
    r = train(cfg_at(base / "data", f"init_from={old}", *STILL), run_dir=tmp_path / "b")
    assert weights(r["model"]) == weights(first["model"])
    with pytest.raises(CheckpointError, match="model.hidden is 16 there, 8 here"):
        train(cfg_at(base / "data", "model.hidden=8", f"init_from={old}"), run_dir=tmp_path / "c")


def test_a_damaged_or_missing_checkpoint_is_refused(parent, tmp_path):
    base, _ = parent
    bad = tmp_path / "ck"
    shutil.copytree(base / "a" / "checkpoints" / "latest", bad)
    data = bytearray((bad / "model.safetensors").read_bytes())
    data[-3] ^= 0x40
    (bad / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"init_from=.*model.safetensors is damaged.*start from another"):
        train(cfg_at(base / "data", f"init_from={bad}"), run_dir=tmp_path / "b")
    with pytest.raises(CheckpointError, match="init_from=.*no checkpoint there"):
        train(cfg_at(base / "data", f"init_from={tmp_path / 'nothing'}"), run_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match="init_optimizer=true .* init_from is not set"):
        train(cfg_at(base / "data", "init_optimizer=true"), run_dir=tmp_path / "d")


@pytest.mark.extra("cabt")
def test_another_games_network_is_refused(parent, cabt_demo_root, tmp_path):
    base, _ = parent
    cfg = compose_config(f"dataset.root={cabt_demo_root}", *ONE_EPOCH, f"init_from={base / 'a'}", *CABT_DEMO)
    with pytest.raises(CheckpointError, match="dataset.game=sim .*dataset.game=cabt.*run with dataset=demo"):
        train(cfg, run_dir=tmp_path / "b")


def test_the_lineage_is_in_the_aim_run(parent, tmp_path):
    from tcgexp.track.aim_repo import open_repo

    base, _ = parent
    repo = tmp_path / "aimrepo"
    r = train(
        cfg_at(base / "data", f"init_from={base / 'a'}", "tracking=aim", f"tracking.repo={repo}"),
        run_dir=tmp_path / "b",
    )
    run = next(open_repo(repo).iter_runs())
    assert run.hash == r["aim_hash"]
    assert run["hparams"]["init_from"] == str(base / "a")
    assert [e["weights_sha256"] for e in run["hparams"]["lineage"]] == [r["init_from"]["weights_sha256"]]
