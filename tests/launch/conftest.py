"""Sweeps beyond one machine: real SLURM daemons and a real Ray cluster on localhost.

The jobs run in processes that the scheduler starts (slurmstepd, Ray's raylet), not under pytest: they
must import this checkout's tcgexp, not whatever `pip install -e` points at, so every command gets
PYTHONPATH=<this checkout> (SLURM's sbatch exports the environment; Ray's workers inherit the
raylet's).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tcgexp.track.aim_repo import open_repo

ROOT = Path(__file__).resolve().parents[2]
SLURM_LOCAL = ROOT / "scripts" / "slurm-local.sh"
SMOKE = ["+experiment=smoke", "dataset.rows_per_day=1000", "trainer.track_every=1"]  # every step reaches Aim


def job_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def multirun(tmp_path, *args: str, sweep: str = "sweep", timeout: int = 300, wait: bool = True):
    """`python -m tcgexp.train --multirun ...` with its data, sweep dir and Aim repo under tmp_path."""
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.train",
        "--multirun",
        f"dataset.root={tmp_path / 'data'}",
        f"hydra.sweep.dir={tmp_path / sweep}",
        *args,
    ]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=timeout)


def check_sweep(sweep_dir: Path, repo: Path, jobs: int) -> list[dict]:
    """What every launcher must leave: per job a run dir with a completed result.json and one Aim run
    (in the sweep's experiment, named after what the job varies), and the sweep report with every job."""
    runs = {r["job_num"]: r for r in open_repo(repo).iter_runs()}
    assert sorted(runs) == list(range(jobs)), sorted(runs)
    assert len({r["sweep"]["id"] for r in runs.values()}) == 1 and len({r.experiment for r in runs.values()}) == 1
    results = []
    for num, run in runs.items():
        job_dir = sweep_dir / str(num)
        result = json.loads((job_dir / "result.json").read_text())
        assert result["status"] == "completed" and result["run_dir"] == str(job_dir), result["status"]
        assert run.hash == result["aim_hash"] and run["status"] == "completed" and not run.active
        overrides = OmegaConf.to_container(OmegaConf.load(job_dir / ".hydra" / "overrides.yaml"))
        assert run["overrides"] == overrides
        metrics = {m.name: len(m.values.values_list()) for m in run.metrics()}
        assert metrics["train/loss"] == result["processed"]["optimizer_steps"] > 0
        assert json.loads((job_dir / "job_status.json").read_text())["status"] == "COMPLETED"
        results.append(result)
    rows = list(csv.DictReader((sweep_dir / "summary.csv").read_text().splitlines()))
    assert sorted(int(r["job"]) for r in rows) == list(range(jobs))
    assert [r["status"] for r in rows] == ["COMPLETED"] * jobs
    assert (sweep_dir / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(sweep_dir.rglob(".cache_spill")), "no spill outlives its job"
    return results


@pytest.fixture(scope="session")
def slurm():
    """A single-node SLURM on localhost (scripts/slurm-local.sh start); yields its partition.

    Skipped only where this machine cannot have one: not root, or the Debian packages missing and
    not installable. Daemons this fixture started are stopped at the end; ones running before are left.
    """
    if os.geteuid() != 0:
        pytest.skip("a local SLURM needs root (scripts/slurm-local.sh starts munged, slurmdbd, slurmctld, slurmd)")
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        pytest.skip("SLURM is not installed and there is no apt-get to install Debian's slurmctld/slurmd/munge")
    was_up = subprocess.run([str(SLURM_LOCAL), "status"], capture_output=True).returncode == 0
    res = subprocess.run([str(SLURM_LOCAL), "start"], capture_output=True, text=True, timeout=1200)
    if res.returncode == 3:
        pytest.skip(f"SLURM's Debian packages cannot be installed here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr[-3000:]
    yield "local"
    if not was_up:
        subprocess.run([str(SLURM_LOCAL), "stop"], capture_output=True, timeout=120)
