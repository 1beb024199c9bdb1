"""tracking=aim: the run is a real Aim run, read back with Aim's own SDK."""
from __future__ import annotations

import json

from aim.storage.context import Context
from omegaconf import OmegaConf

from tcgexp.track.aim_run import open_repo
from tcgexp.train import train


def test_run_is_tracked_in_aim(train_cfg, tmp_path):
    cfg = train_cfg("tracking=aim", f"tracking.repo={tmp_path / 'aimrepo'}", "tracking.experiment=unit",
                    "trainer.epochs=1")
    result = train(cfg, run_dir=tmp_path / "run")
    repo = open_repo(tmp_path / "aimrepo")
    runs = list(repo.iter_runs())
    assert [r.hash for r in runs] == [result["aim_hash"]]
    run = runs[0]
    assert run.experiment == "unit"
    assert run["hparams"] == {**json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True))), "world_size": 1}
    assert run.name == "defaults" and run["swept"] == {} and run["status"] == "completed"
    # names as in the README, in Aim context {"subset": "train"} / {"subset": "val"} for grouping
    metrics = {(m.name, m.context.to_dict().get("subset")): m for m in run.metrics()}
    steps = result["processed"]["optimizer_steps"]
    for name in ("train/loss", "train/policy", "lr", "train/grad_norm", "cache_train/hits", "cache_train/misses",
                 "cache_train/hit_rate_pct", "cache_train/bytes_loaded", "cache_train/remote_bytes"):
        assert (name, "train") in metrics, name
        assert len(metrics[name, "train"].values.values_list()) == steps, name
    for name in ("val/loss", "val/accuracy", "val/policy_early", "cache_val/hits"):
        assert len(metrics[name, "val"].values.values_list()) == 1, name
    assert {subset for name, subset in metrics if not name.startswith("__system__")} == {"train", "val"}
    assert len(run.get_metric("val/loss", Context({"subset": "val"})).values.values_list()) == 1


def test_a_resumed_run_continues_its_aim_run(train_cfg, tmp_path):
    repo = tmp_path / "aimrepo"
    first = train(train_cfg("tracking=aim", f"tracking.repo={repo}", "trainer.max_steps=5"), run_dir=tmp_path / "a")
    second = train(train_cfg("tracking=aim", f"tracking.repo={repo}", f"resume={tmp_path / 'a'}"),
                   run_dir=tmp_path / "b")
    assert second["aim_hash"] == first["aim_hash"]
    runs = list(open_repo(repo).iter_runs())
    assert len(runs) == 1
    points = {m.name: m.values.values_list() for m in runs[0].metrics()}
    assert len(points["train/loss"]) == second["processed"]["optimizer_steps"], "steps 1..5, then 6..end"
