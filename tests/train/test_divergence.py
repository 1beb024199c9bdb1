"""The divergence guard: garbage numbers stop the run loudly, never a quiet NaN result."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import mlx.core as mx
import pytest

from tcgexp.errors import ConfigError
from tcgexp.learn.diverge import DivergenceError, strict
from tcgexp.lifecycle.checkpoint import CheckpointError, check_finite_weights
from tcgexp.schema import validate
from tcgexp.train import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def strict_load(path):
    """json.loads that refuses NaN/Infinity tokens, as strict parsers (JavaScript, jq) do."""

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token} in {path}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_huge_learning_rate_stops_within_the_first_epoch(train_cfg, tmp_path):
    run_dir = tmp_path / "run"
    cfg = train_cfg("optimizer.lr=1e6", "checkpoint.latest_every_steps=1")
    with pytest.raises(DivergenceError, match=r"diverged at epoch 1, optimizer step \d+ .*optimizer\.lr=1000000\.0"):
        train(cfg, run_dir=run_dir)
    result = strict_load(run_dir / "result.json")
    assert result["status"] == "diverged" and "optimizer.lr" in result["error"]
    assert result["best"] == {"val_loss": None, "epoch": None} and result["final"] is None
    # latest/ after every step: the steps before the blamed one left theirs, with finite weights
    step = int(result["error"].split("optimizer step ")[1].split()[0])
    latest = run_dir / "checkpoints" / "latest"
    assert latest.exists() == (step > 1), (step, latest.exists())
    if step > 1:
        params = mx.load(str(latest / "model.safetensors"))
        assert all(bool(mx.all(mx.isfinite(v)).item()) for v in params.values())
        assert strict_load(latest / "state.json")["progress"]["opt_steps"] == step - 1
    assert not (run_dir / ".cache_spill").exists()


@pytest.mark.parametrize(
    "override",
    [
        "optimizer.lr=inf",
        "optimizer.lr=nan",
        "trainer.aux_weight=nan",
        "trainer.grad_clip=-1",
        "trainer.aux_weight=-inf",
    ],
)
def test_non_finite_or_negative_knobs_are_refused_before_any_work(train_cfg, override):
    with pytest.raises(ConfigError, match=override.split("=")[0].replace(".", r"\.")):
        validate(train_cfg(override))


def test_the_cli_exits_non_zero_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"dataset.root={tmp_path / 'data'}",
            "dataset.rows_per_day=600",
            "dataset.row_group_rows=128",
            "tbptt.batch_size=64",
            "model.hidden=16",
            "trainer.epochs=1",
            "tracking=off",
            "optimizer.lr=1e6",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: training diverged at epoch 1") and "Traceback" not in res.stderr
    assert strict_load(run_dir / "result.json")["status"] == "diverged"


def test_a_diverged_run_is_marked_failed_in_aim(train_cfg, tmp_path):
    from tcgexp.track.aim_repo import open_repo

    cfg = train_cfg("optimizer.lr=1e6", "tracking=aim", f"tracking.repo={tmp_path / 'aim'}")
    with pytest.raises(DivergenceError):
        train(cfg, run_dir=tmp_path / "run")
    ok = train(
        train_cfg("tracking=aim", f"tracking.repo={tmp_path / 'aim'}", "trainer.epochs=1"), run_dir=tmp_path / "ok"
    )
    runs = {r.hash: r for r in open_repo(tmp_path / "aim").iter_runs()}
    good = runs.pop(ok["aim_hash"])
    (bad,) = runs.values()
    assert bad["status"] == "failed" and "diverged" in bad["error"] and "failed" in bad.props.tags
    assert good["status"] == "completed" and "failed" not in good.props.tags


def test_checkpoints_refuse_non_finite_weights(tmp_path):
    from tcgexp.learn.model import RecurrentPolicy

    model = RecurrentPolicy(4, 3, hidden=8, memory=True)
    check_finite_weights(model, tmp_path)
    model.policy.bias = mx.array([0.0, float("nan"), 0.0])
    with pytest.raises(CheckpointError, match="policy.bias holds NaN"):
        check_finite_weights(model, tmp_path)


def test_strict_replaces_every_non_finite_number():
    out = strict({"a": float("nan"), "b": [1.0, float("inf"), {"c": -math.inf}], "d": 2})
    assert out == {"a": None, "b": [1.0, None, {"c": None}], "d": 2}
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize("every", [2, 1000])
def test_reading_results_a_step_late_blames_the_same_step_and_saves_nothing_non_finite(train_cfg, tmp_path, every):
    """The fused loop reads each step's values while the next one computes; the guard still names the
    first non-finite step (the same as reading every step at once: latest_every_steps=1 settles them
    all) and no checkpoint holds the weights of a step after it. The run diverges at optimizer step 2, so
    with latest_every_steps=2 a latest/ falls due at the very step that diverged: it must not be written."""

    def blamed(run_dir, latest_every):
        cfg = train_cfg("optimizer.lr=1e6", f"checkpoint.latest_every_steps={latest_every}")
        with pytest.raises(DivergenceError) as err:
            train(cfg, run_dir=run_dir)
        latest = run_dir / "checkpoints" / "latest"
        if latest.exists():
            params = mx.load(str(latest / "model.safetensors"))
            assert all(bool(mx.all(mx.isfinite(v)).item()) for v in params.values())
            saved = json.loads((latest / "state.json").read_text())["progress"]["opt_steps"]
            step = int(str(err.value).split("optimizer step ")[1].split()[0])
            assert saved < step
        return str(err.value).split(":")[0]

    assert blamed(tmp_path / "late", every) == blamed(tmp_path / "at_once", 1)
