"""Sweeps on the joblib launcher: a halving sweep's rung runs its trials in parallel, one batch at a
time; a grid sweep whose job is stopped in its worker ends as the job does. (SLURM and Ray: tests/launch/.)"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.sweep.conftest import ROOT, SPACE, TRIAL, halving, job_env, trials

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
    res = halving(
        tmp_path,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=3",
        "tracking=off",
        *SPACE,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "is launching 2 jobs" in res.stdout + res.stderr  # batches of the launcher's n_jobs
    doc = trials(tmp_path / "sweep")
    assert sorted(t["state"] for t in doc["trials"]) == ["complete", "pruned", "pruned", "pruned"]
    s = spans(doc)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(s)), f"no two trials overlapped: {s}"


def grid_sweep_training(tmp_path) -> subprocess.Popen:
    """A 2-job grid sweep on joblib's workers, in a session of its own, once both jobs have a latest/."""
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.train",
        "--multirun",
        *TRIAL,
        f"dataset.root={tmp_path / 'data'}",
        f"hydra.sweep.dir={sweep}",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "tracking=off",
        "model.hidden=8,16",
        "trainer.epochs=100",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not all((sweep / j / "checkpoints" / "latest" / "state.json").exists() for j in ("0", "1")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    return proc


def workers(pid: int) -> list:
    """joblib's worker processes under the sweep `pid` (loky's, not its resource tracker)."""
    import psutil

    found = [
        p
        for p in psutil.Process(pid).children(recursive=True)
        if "popen_loky" in " ".join(p.cmdline()) and "resource_tracker" not in " ".join(p.cmdline())
    ]
    # a worker's child between fork and exec (a job starting its Aim child, git) still shows the worker's command
    # line: counted once, as its worker (CI on a loaded machine saw three)
    pids = {p.pid for p in found}
    return [p for p in found if p.ppid() not in pids]


def test_a_job_stopped_in_its_joblib_worker_ends_the_grid_sweep_with_its_line_and_130(tmp_path):
    """A job stopped in its worker (a signal to the job alone, as a node's preemption sends) ends with the run's
    own interruption, a SystemExit carrying its line and result, which crosses back to the sweep pickled: the
    sweep ends 130 with the job's line, not loky's broken-pool traceback (before tests/test_exceptions.py's
    fix: exit 1, "A result has failed to un-serialize")."""
    proc = grid_sweep_training(tmp_path)
    found = workers(proc.pid)
    assert len(found) == 2, found
    for worker in found:
        worker.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, out[-3000:]
    assert "Traceback" not in out and "BrokenProcessPool" not in out, out[-3000:]
    assert "interrupted by SIGINT" in out and "continue with resume=" in out, out[-3000:]


@pytest.mark.parametrize("run", range(2), ids=["first", "second"])  # two tries: the race below goes either way
def test_ctrl_c_to_a_joblib_grid_sweep_ends_it_with_one_line_and_130(tmp_path, run):
    """Ctrl-C reaches the sweep and its workers at once; either the jobs' interruptions come back first, or the
    sweep's own KeyboardInterrupt (joblib waiting for them) does: both end 130, without a traceback."""
    proc = grid_sweep_training(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "interrupted by SIGINT" in out and "resume=" in out, out[-3000:]
