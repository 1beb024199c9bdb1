"""optuna-dashboard on a halving sweep's study, opened in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.sweep.conftest import ROOT, SPACE, halving, job_env

pytestmark = [pytest.mark.slow, pytest.mark.extra("sweep")]


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (apt-get install chromium)")
def test_the_dashboard_shows_the_sweeps_study(tmp_path):
    res = halving(
        tmp_path,
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=3",
        "hydra.sweeper.n_trials=3",
        "tracking=off",
        *SPACE,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    shot = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.sweep.dashboard",
            str(tmp_path / "sweep"),
            "--out",
            str(tmp_path / "shots"),
            "--settle",
            "6",
        ],
        cwd=ROOT,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shot.returncode == 0, shot.stderr[-3000:]
    assert "the page shows its name" in shot.stderr, shot.stderr
    data = (tmp_path / "shots" / "optuna_dashboard.png").read_bytes()
    assert data[:4] == b"\x89PNG" and len(data) > 20_000
