"""A halving sweep on the joblib launcher: a rung's trials run in parallel, one batch at a time.
(SLURM and Ray: tests/launch/.)"""
from __future__ import annotations

import json

import pytest

from tests.sweep.conftest import SPACE, halving, trials

pytestmark = pytest.mark.slow


def spans(doc: dict) -> list[tuple[float, float]]:
    """[start, end] of each trial that ran one job only (pruned at the first rung): result.json is its end."""
    out = []
    for t in doc["trials"]:
        if t["state"] == "pruned" and t["epochs"] == doc["rungs"][0]:
            path = __import__("pathlib").Path(t["run_dirs"][0]) / "result.json"
            end = path.stat().st_mtime
            out.append((end - json.loads(path.read_text())["wall_seconds"], end))
    return sorted(out)


def test_joblib_runs_a_rungs_trials_in_parallel(tmp_path):
    res = halving(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_trials=4",
                  "hydra.sweeper.min_epochs=1", "hydra.sweeper.max_epochs=3", "tracking=off", *SPACE)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "is launching 2 jobs" in res.stdout + res.stderr  # batches of the launcher's n_jobs
    doc = trials(tmp_path / "sweep")
    assert sorted(t["state"] for t in doc["trials"]) == ["complete", "pruned", "pruned", "pruned"]
    s = spans(doc)
    assert any(b[0] < a[1] for a, b in zip(s, s[1:])), f"no two trials overlapped: {s}"
