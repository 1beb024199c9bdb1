"""Real halving sweeps (``tcgexp-train --multirun hydra/sweeper=halving``) on a tiny corpus, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
# a small real run: ~1 s per epoch here; latest/ every 4 optimizer steps (a kill loses little)
TRIAL = [
    *TINY,
    "dataset.rows_per_day=1200",
    "dataset.row_group_rows=256",
    "tbptt.batch_size=64",
    "checkpoint.latest_every_steps=4",
    "scheduler.warmup_steps=3",
]
SPACE = ["optimizer.lr=tag(log, interval(1e-3, 3e-2))", "model.hidden=choice(8,16)", "tbptt.chunk=choice(4,8)"]


def job_env() -> dict[str, str]:
    """This checkout's tcgexp in every process a launcher starts (joblib's workers, SLURM's jobs)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def halving_cmd(tmp_path: Path, *args: str, sweep: str = "sweep") -> list[str]:
    return [
        sys.executable,
        "-m",
        "tcgexp.train",
        "--multirun",
        "hydra/sweeper=halving",
        *TRIAL,
        f"dataset.root={tmp_path / 'data'}",
        f"hydra.sweep.dir={tmp_path / sweep}",
        *args,
    ]


def halving(tmp_path: Path, *args: str, sweep: str = "sweep", timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        halving_cmd(tmp_path, *args, sweep=sweep),
        cwd=ROOT,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trials(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "trials.json").read_text())


def study_of(sweep_dir: Path, storage: str | None = None):
    import optuna

    url = storage or f"sqlite:///{sweep_dir / 'optuna.db'}"
    [summary] = optuna.get_all_study_summaries(url)
    return optuna.load_study(study_name=summary.study_name, storage=url)
