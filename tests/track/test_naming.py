"""Run names, swept columns and metric contexts: fast, no Hydra job, no Aim repo."""

from __future__ import annotations

from omegaconf import OmegaConf

from tcgexp.track.aim_run import by_context, run_attributes, subset_of
from tcgexp.track.context import JobContext, swept_keys


def test_a_sweep_job_is_named_after_what_the_sweep_varies(tmp_path):
    OmegaConf.save(
        OmegaConf.create(
            {
                "hydra": {
                    "sweeper": {"params": {"cache": "off,plan"}},
                    "overrides": {
                        "task": [
                            "+experiment=smoke",
                            "tbptt.chunk=16,32",
                            "dataset.root=/tmp/d",
                            "tracking.repo=/tmp/aim",
                            "hydra.launcher.n_jobs=2",
                        ]
                    },
                }
            }
        ),
        tmp_path / "multirun.yaml",
    )
    keys = swept_keys(tmp_path)
    assert keys == {"cache", "tbptt.chunk"}
    ctx = JobContext(
        "abc",
        str(tmp_path),
        3,
        ["+experiment=smoke", "tbptt.chunk=32", "dataset.root=/tmp/d", "tracking.repo=/tmp/aim", "cache=plan"],
        "sweep x",
        keys,
    )
    assert ctx.name == "tbptt.chunk=32 cache=plan"
    assert ctx.swept == {"tbptt.chunk": 32, "cache": "plan"}
    attrs = run_attributes({"seed": 0}, ctx)
    assert attrs["name"] == ctx.name and attrs["swept"] == ctx.swept and attrs["status"] == "running"
    assert attrs["sweep"] == {"id": "abc", "dir": str(tmp_path)} and attrs["job_num"] == 3


def test_outside_a_sweep_paths_and_hydra_keys_are_not_the_name():
    ctx = JobContext(
        overrides=[
            "dataset.root=/data/x",
            "hydra.run.dir=/tmp/r",
            "tracking.repo=.",
            "resume=runs/a",
            "cache=off",
            "optimizer.lr=1e-3",
        ]
    )
    assert ctx.name == "cache=off optimizer.lr=1e-3"
    assert ctx.swept == {"cache": "off", "optimizer.lr": 0.001}
    assert JobContext(overrides=["dataset.root=/x"]).name == JobContext().name == "defaults"


def test_without_multirun_yaml_the_name_falls_back_to_the_overrides(tmp_path):
    assert swept_keys(tmp_path) is None
    assert JobContext("a", str(tmp_path), 0, ["cache=lru", "dataset.root=/d"], "s", None).name == "cache=lru"


def test_metrics_keep_their_names_and_get_a_subset_context():
    assert [
        subset_of(n)
        for n in (
            "train/loss",
            "lr",
            "train/grad_norm",
            "cache_train/hits",
            "val/loss",
            "cache_val/misses",
            "lr_scale",
            "other",
        )
    ] == ["train", "train", "train", "train", "val", "val", None, None]
    groups = {
        c.get("subset"): v
        for c, v in by_context({"train/loss": 1, "lr": 0.1, "cache_train/hits": 2, "val/loss": 3, "cache_val/hits": 4})
    }
    assert groups == {
        "train": {"train/loss": 1.0, "lr": 0.1, "cache_train/hits": 2.0},
        "val": {"val/loss": 3.0, "cache_val/hits": 4.0},
    }


def test_the_screenshot_tool_needs_a_folder_and_queries_one_sweep(tmp_path, capsys):
    import json as _json

    import pytest

    from tcgexp.report import screenshot

    with pytest.raises(SystemExit):
        screenshot.main(["--repo", str(tmp_path)])  # no --out: never over docs/ by default
    assert "--out" in capsys.readouterr().err
    (tmp_path / "sweep").mkdir()
    sid = screenshot.sweep_id(str(tmp_path / "sweep"))
    assert len(sid) == 12 and screenshot.sweep_id(sid) == sid
    pages = screenshot.pages("http://h", str(tmp_path / "sweep"), ["swept.cache"])
    for url, _ in pages.values():
        state = url.split("select=")[1]
        assert f'run.sweep.id == \\"{sid}\\"' in _decode(state) or f'run.sweep.id == "{sid}"' in _decode(state)
    assert any('"swept.cache"' in step and '"status"' in step for step in pages["aim_runs"][1])
    assert _json.loads(_decode(screenshot.aim_state({"a": 1}))) == {"a": 1}


def _decode(state: str) -> str:
    import base64
    import urllib.parse

    raw = state[2:].replace("-", "+").replace("_", "/")
    return urllib.parse.unquote(base64.b64decode(raw + "=" * (-len(raw) % 4)).decode())


def test_a_halving_trial_is_named_by_its_draw_to_4_digits_and_not_by_its_seed(tmp_path):
    OmegaConf.save(
        OmegaConf.create(
            {
                "hydra": {
                    "sweeper": {"seeds": 3, "params": None},
                    "overrides": {
                        "task": [
                            "optimizer.lr=tag(log, interval(1e-4, 1e-2))",
                            "model.hidden=choice(64,128)",
                            "dataset=5d",
                        ]
                    },
                }
            }
        ),
        tmp_path / "multirun.yaml",
    )
    keys = swept_keys(tmp_path)
    assert keys == {"optimizer.lr", "model.hidden"}  # seeds are replicates: a configuration's runs share its name
    ctx = JobContext(
        "a",
        str(tmp_path),
        7,
        [
            "dataset=5d",
            "optimizer.lr=0.0012345678901234567",
            "model.hidden=64",
            "trainer.epochs=9",
            "trainer.stop_at_epoch=3",
            "seed=2",
            f"resume={tmp_path}/3/seed2",
        ],
        "s",
        keys,
    )
    assert ctx.name == "optimizer.lr=0.001235 model.hidden=64"
    assert ctx.swept == {"optimizer.lr": 0.0012345678901234567, "model.hidden": 64}  # the value in full


def test_a_grid_that_sweeps_seeds_names_its_runs_without_them(tmp_path):
    OmegaConf.save(
        OmegaConf.create(
            {
                "hydra": {
                    "sweeper": {"params": {"cache": "off,plan"}},
                    "overrides": {"task": ["+experiment=smoke", "seed=0,1,2"]},
                }
            }
        ),
        tmp_path / "multirun.yaml",
    )
    assert swept_keys(tmp_path) == {"cache"}
    ctx = JobContext("a", str(tmp_path), 4, ["cache=plan", "+experiment=smoke", "seed=1"], "s", swept_keys(tmp_path))
    assert ctx.name == "cache=plan" and ctx.swept == {"cache": "plan"}
    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"task": ["seed=0,1,2"]}}}), tmp_path / "multirun.yaml")
    assert swept_keys(tmp_path) == frozenset()  # seeds only: every run is "defaults"
    assert JobContext("a", str(tmp_path), 1, ["seed=1"], "s", swept_keys(tmp_path)).name == "defaults"
