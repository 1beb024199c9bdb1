"""Real --multirun sweeps: Aim runs per job read back with Aim's SDK, sweep reports, launchers."""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from tcgexp.track.aim_repo import open_repo
from tests.conftest import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = ["+experiment=smoke", "dataset.rows_per_day=1000"]


def sweep(tmp_path, *args, timeout=300):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "--multirun",
            *SMOKE,
            f"dataset.root={tmp_path / 'data'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_two_job_sweep_tracks_to_aim_and_reports(tmp_path):
    res = sweep(tmp_path, f"tracking.repo={tmp_path / 'aim'}", "trainer.track_every=1")  # every step, to count them
    assert res.returncode == 0, res.stderr[-3000:]
    runs = list(open_repo(tmp_path / "aim").iter_runs())
    assert len(runs) == 2
    assert len({r["sweep"]["id"] for r in runs}) == 1 and len({r.experiment for r in runs}) == 1
    for run in runs:
        job_dir = tmp_path / "sweep" / str(run["job_num"])
        job_cfg = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
        assert run["hparams"] == {
            **json.loads(json.dumps(OmegaConf.to_container(job_cfg, resolve=True))),
            "world_size": 1,
        }
        assert run["overrides"] == OmegaConf.to_container(OmegaConf.load(job_dir / ".hydra" / "overrides.yaml"))
        cache = OmegaConf.load(job_dir / ".hydra" / "hydra.yaml").hydra.runtime.choices.cache  # off or plan
        assert run.name == f"cache={cache}" and run["swept"] == {"cache": cache}, (run.name, run["swept"])
        assert run["status"] == "completed" and "failed" not in run.props.tags
        result = json.loads((job_dir / "result.json").read_text())
        steps, evals = result["processed"]["optimizer_steps"], len(result["history"])
        metrics = {m.name: len(m.values.values_list()) for m in run.metrics()}
        subsets = {m.name: m.context.to_dict().get("subset") for m in run.metrics()}
        assert subsets["train/loss"] == subsets["cache_train/hits"] == "train"
        assert subsets["val/loss"] == subsets["cache_val/hits"] == "val"
        for name in result["cache"]["train"]:
            assert metrics[f"cache_train/{name}"] == steps, name
            assert metrics[f"cache_val/{name}"] == evals, name
        assert metrics["train/loss"] == steps and metrics["val/loss"] == evals
    rows = list(csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines()))
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    assert (tmp_path / "sweep" / "summary.md").read_text().count("| COMPLETED |") == 2
    assert (tmp_path / "sweep" / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.rglob(".cache_spill")), "no spill outlives its job"


def test_a_failed_job_still_leaves_the_others_row_and_no_spill(tmp_path):
    # job 1's row budget is smaller than the largest decision: refused before training
    res = sweep(tmp_path, "tracking=off", "cache=plan", "tbptt.batch_size=64,2")
    assert res.returncode != 0, "Hydra reports the failed job"
    rows = {r["job"]: r for r in csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines())}
    assert rows["0"]["status"] == "COMPLETED" and float(rows["0"]["val_loss"]) > 0
    assert rows["1"]["status"] == "FAILED" and "tbptt.batch_size>=" in rows["1"]["error"]
    assert "## Failed jobs" in (tmp_path / "sweep" / "summary.md").read_text()
    assert not list(tmp_path.rglob(".cache_spill"))
    # Hydra stopped before its end-of-sweep callback: the findings (the failed option, ranked below the one that
    # completed) are there all the same, and the console's last lines say them after the error, ending with how
    # to rebuild the report
    [failed] = json.loads((tmp_path / "sweep" / "findings.json").read_text())
    assert (failed["key"], failed["vs"], failed["best"], failed["verdict"]) == ("tbptt.batch_size", "2", "64", "failed")
    said = [line for line in res.stderr.splitlines() if line.startswith(("[sweep] ", "error: "))]
    assert said[-4].startswith("error: a sweep job failed") and said[-3].startswith("[sweep] findings (")
    assert said[-2] == (
        "[sweep]   tbptt.batch_size: 2: failed in 1 of 1 job, ranked below every option that completed "
        "(best on val/loss: 64)"
    )
    assert said[-1] == f"[sweep] rebuild this report any time: tcgexp-report {tmp_path / 'sweep'}"


@pytest.mark.slow
def test_joblib_runs_jobs_in_parallel_without_aim_errors(tmp_path):
    res = sweep(
        tmp_path,
        f"tracking.repo={tmp_path / 'aim'}",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "cache=off,plan,lru,hot60",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[tracking]" not in res.stderr and "ERROR" not in res.stderr
    runs = list(open_repo(tmp_path / "aim").iter_runs())
    assert sorted(r["job_num"] for r in runs) == [0, 1, 2, 3]
    spans = []  # [start, end] of each job: result.json is written at the end, after wall_seconds
    for i in range(4):
        path = tmp_path / "sweep" / str(i) / "result.json"
        end = path.stat().st_mtime
        spans.append((end - json.loads(path.read_text())["wall_seconds"], end))
    spans.sort()
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), f"no two jobs overlapped: {spans}"
    assert len(list(csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines()))) == 4
    found = {f["metric"]: f for f in json.loads((tmp_path / "sweep" / "findings.json").read_text())}
    assert found["val/loss"]["verdict"] == "identical" and "[sweep] findings (" in res.stderr


def test_submitit_local_runs_a_job(tmp_path):
    res = sweep(tmp_path, "tracking=off", "hydra/launcher=submitit_local", "cache=plan")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / "sweep" / "0" / "result.json").read_text())["processed"]["optimizer_steps"] > 0
    assert list((tmp_path / "sweep").rglob("*.submitit*")) or (tmp_path / "sweep" / ".submitit").exists()
    assert json.loads((tmp_path / "sweep" / "findings.json").read_text()) == []  # one job: nothing to compare
    assert "[sweep] findings: none: nothing was swept (one job)" in res.stderr  # cache=plan over the preset's off,plan
    assert "[sweep] rebuild this report" in res.stderr


@pytest.mark.slow
def test_tracks_to_a_real_aim_server(tmp_path, aim_server):
    repo, port, _ = aim_server
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            *SMOKE[1:],
            "+experiment=smoke",
            "cache=plan",
            f"dataset.root={tmp_path / 'data'}",
            f"hydra.run.dir={tmp_path / 'run'}",
            "tracking=aim_remote",
            f"tracking.uri=aim://127.0.0.1:{port}",
            "trainer.track_every=1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    runs = list(open_repo(repo).iter_runs())
    assert [r.hash for r in runs] == [result["aim_hash"]]
    metrics = {m.name: len(m.values.values_list()) for m in runs[0].metrics()}
    assert metrics["train/loss"] == result["processed"]["optimizer_steps"] and metrics["cache_val/hits"] == 1


def test_unreachable_server_costs_tracking_not_training(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            *SMOKE[1:],
            "+experiment=smoke",
            "cache=plan",
            f"dataset.root={tmp_path / 'data'}",
            f"hydra.run.dir={tmp_path / 'run'}",
            "tracking=aim_remote",
            f"tracking.uri=aim://127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stderr.count("[tracking]") == 1 and "training continues without tracking" in res.stderr
    assert json.loads((tmp_path / "run" / "result.json").read_text())["aim_hash"] is None


@pytest.mark.slow
def test_server_stopped_mid_run_and_the_job_still_finishes(tmp_path, aim_server):
    _, port, server = aim_server
    run_dir = tmp_path / "run"
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "+experiment=smoke",
            "dataset.rows_per_day=3000",
            "trainer.epochs=12",
            "cache=plan",
            f"dataset.root={tmp_path / 'data'}",
            f"hydra.run.dir={run_dir}",
            "tracking=aim_remote",
            f"tracking.uri=aim://127.0.0.1:{port}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoints" / "epoch_0001").exists():
        assert job.poll() is None and time.monotonic() < deadline, "the job ended before the server could stop"
        time.sleep(0.1)
    os.killpg(server.pid, signal.SIGKILL)  # the server and its uvicorn worker
    _out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    assert err.count("[tracking]") == 1 and "lost the Aim server" in err
    result = json.loads((run_dir / "result.json").read_text())
    assert result["processed"]["optimizer_steps"] == result["planned"]["optimizer_steps"]


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (apt-get install chromium)")
def test_aim_ui_shows_the_sweep_in_headless_chromium(tmp_path):
    res = sweep(tmp_path, f"tracking.repo={tmp_path / 'aim'}")
    assert res.returncode == 0, res.stderr[-3000:]
    shot = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.report.screenshot",
            "--repo",
            str(tmp_path / "aim"),
            "--sweep",
            str(tmp_path / "sweep"),
            "--out",
            str(tmp_path / "shots"),
            "--settle",
            "8",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shot.returncode == 0, shot.stderr[-3000:]
    for name in ("aim_runs.png", "aim_metrics.png"):
        data = (tmp_path / "shots" / name).read_bytes()
        assert data[:4] == b"\x89PNG" and len(data) > 20_000, name


def test_a_diverged_job_is_failed_with_its_reason_in_the_report(tmp_path):
    res = sweep(tmp_path, "tracking=off", "optimizer.lr=1e-3,1e6")
    assert res.returncode != 0, "a sweep with a diverged job does not look like a result"
    rows = {r["job"]: r for r in csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines())}
    assert rows["0"]["status"] == "COMPLETED" and math.isfinite(float(rows["0"]["val_loss"]))
    assert rows["1"]["status"] == "FAILED" and "training diverged at epoch 1" in rows["1"]["error"]
    assert rows["1"]["val_loss"] == "" and rows["1"]["best_val_loss"] == ""
    assert "DivergenceError" in (tmp_path / "sweep" / "summary.md").read_text()
    # the diverged option is a finding, ranked last, in the sweep's last lines (never "none yet": it has ended)
    found = json.loads((tmp_path / "sweep" / "findings.json").read_text())
    [lost] = [f for f in found if f["verdict"] == "diverged"]
    assert (lost["key"], lost["vs"], lost["failed"], lost["jobs"]) == ("optimizer.lr", "1e+06", 2, 2)
    said = [line for line in res.stderr.splitlines() if line.startswith("[sweep] ")]
    assert (
        "[sweep]   optimizer.lr: 1e+06: diverged in 2 of 2 jobs, ranked below every option that completed"
        in "\n".join(said)
    )
    assert not [line for line in said if "none yet" in line]
    assert "Warning" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert (tmp_path / "sweep" / "summary.png").read_bytes()[:4] == b"\x89PNG"
