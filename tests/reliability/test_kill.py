"""SIGKILL at the worst moments, then resume=: final weights bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import mlx.core as mx
import numpy as np
import pytest

from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.train import train
from tests.conftest import assert_continued, compose_config
from tests.train.conftest import TINY_TRAIN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERRIDES = [*TINY_TRAIN, "checkpoint.latest_every_steps=2"]

# Fault injection lives in the child process only: it patches one function to SIGKILL itself.
CHILD = textwrap.dedent("""
    import os, signal, sys, json
    from tcgexp.learn.blas import setup
    setup()  # first: MKL before mlx.core, as every entry point does (importing tcgexp does nothing)
    from tcgexp.train import train
    import mlx.core as mx
    from tcgexp.app import compose
    import tcgexp.train.loop as loop
    fault, run_dir, *overrides = sys.argv[1:]
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)
    if fault == "validation":          # the second validation, mid-way through its plan
        real = loop.Loop.validate
        calls = {"n": 0}
        def validate(self):
            calls["n"] += 1
            if calls["n"] == 2:
                self.val_loader.transform = lambda b: die()
            return real(self)
        loop.Loop.validate = validate
    elif fault == "checkpoint":        # inside the 4th latest/ write, after model.safetensors
        real = mx.save_safetensors
        calls = {"n": 0}
        def save(path, arrays):
            calls["n"] += 1
            real(path, arrays)
            if calls["n"] == 3 * 4 - 2:
                die()
        mx.save_safetensors = save
    train(compose(*overrides), run_dir=run_dir)
""")


def weights(run_dir) -> dict:
    return {
        k: np.array(v).tobytes()
        for k, v in mx.load(str(run_dir / "checkpoints" / "latest" / "model.safetensors")).items()
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    result = train(compose_config(f"dataset.root={root / 'data'}", *OVERRIDES), run_dir=root / "base")
    return root, weights(root / "base"), result


def resume(root, run_dir, new_dir, *more):
    """resume=<run_dir> into new_dir; it must continue the checkpoint there, not start again."""
    done = ckpt.read_state(ckpt.find(str(run_dir)))["progress"]["opt_steps"]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"dataset.root={root / 'data'}",
            *OVERRIDES,
            *more,
            f"resume={run_dir}",
            f"hydra.run.dir={new_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((new_dir / "result.json").read_text())
    assert_continued(result, done)
    return result


@pytest.mark.parametrize("tracking", ["off", "aim"])
def test_killed_mid_epoch(baseline, tmp_path, tracking):
    root, want, full = baseline
    run_dir = tmp_path / "a"
    aim = (
        [f"tracking={tracking}", f"tracking.repo={tmp_path / 'aim'}", "trainer.track_every=1"]
        if tracking == "aim"
        else []
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"dataset.root={root / 'data'}",
            *OVERRIDES,
            *aim,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = run_dir / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 120
    while True:
        try:
            if json.loads(state.read_text())["progress"]["opt_steps"] >= 6:
                break
        except (OSError, ValueError, KeyError):
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it was killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    result = resume(root, run_dir, tmp_path / "b", *aim)
    assert result["processed"]["optimizer_steps"] == full["processed"]["optimizer_steps"]
    assert weights(tmp_path / "b") == want
    if tracking == "aim":  # the killed job's Aim run is the one that continues, with every step
        from tcgexp.track.aim_repo import open_repo

        runs = list(open_repo(tmp_path / "aim").iter_runs())
        assert [r.hash for r in runs] == [result["aim_hash"]]
        points = {m.name: len(m.values.values_list()) for m in runs[0].metrics()}
        assert points["train/loss"] == result["processed"]["optimizer_steps"]


@pytest.mark.parametrize("fault", ["validation", "checkpoint"])
def test_killed_inside_validation_or_a_checkpoint_write(baseline, tmp_path, fault):
    root, want, _ = baseline
    run_dir = tmp_path / "a"
    res = subprocess.run(
        [sys.executable, "-c", CHILD, fault, str(run_dir), f"dataset.root={root / 'data'}", *OVERRIDES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == -signal.SIGKILL, res.stderr[-2000:]
    latest = run_dir / "checkpoints" / "latest"
    assert sorted(p.name for p in latest.iterdir()) == [
        "checksums.json",
        "lanes.safetensors",
        "model.safetensors",
        "optimizer.safetensors",
        "state.json",
    ], "never half-written"
    resume(root, run_dir, tmp_path / "b")
    assert weights(tmp_path / "b") == want


@pytest.mark.slow
def test_killed_during_a_multirun_job(baseline, tmp_path):
    root, want, _ = baseline
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "--multirun",
            f"dataset.root={root / 'data'}",
            *OVERRIDES,
            "seed=0,1",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    state = sweep / "0" / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 120
    while not state.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resume(root, sweep / "0", tmp_path / "b")  # job 0 is seed=0: the baseline's config
    assert weights(tmp_path / "b") == want
