"""hydra/launcher=submitit_slurm against a real single-node SLURM (scripts/slurm-local.sh): a sweep, and a
job stopped by `scancel --signal=TERM` that checkpoints, exits, and resumes bit-identically."""

from __future__ import annotations

import csv
import json
import subprocess
import time

import pytest
from omegaconf import OmegaConf

from tcgexp.track.aim_repo import open_repo
from tcgexp.train import train
from tests.conftest import compose_config
from tests.launch.conftest import SMOKE, check_sweep, multirun
from tests.reliability.test_kill import weights
from tests.train.conftest import TINY_TRAIN

pytestmark = pytest.mark.slow


def launcher(partition: str) -> list[str]:
    # what a user sets for a real cluster (README, "Beyond one machine"); 1 CPU each: both jobs fit on 2
    return [
        "hydra/launcher=submitit_slurm",
        f"hydra.launcher.partition={partition}",
        "hydra.launcher.timeout_min=10",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
    ]


def slurm_job_id(job_dir) -> str:
    """The SLURM job id submitit gave the Hydra job (hydra.job.id, set inside the job)."""
    return str(OmegaConf.load(job_dir / ".hydra" / "hydra.yaml").hydra.job.id)


def sacct_state(job_id: str) -> str:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] if out else ""


def test_a_two_job_sweep_runs_on_slurm(slurm, tmp_path):
    res = multirun(tmp_path, *SMOKE, f"tracking.repo={tmp_path / 'aim'}", *launcher(slurm))
    assert res.returncode == 0, res.stderr[-3000:]
    check_sweep(tmp_path / "sweep", tmp_path / "aim", jobs=2)
    for num in (0, 1):  # each ran as its own SLURM job, which the accounting saw complete
        assert sacct_state(slurm_job_id(tmp_path / "sweep" / str(num))) == "COMPLETED"


# long enough (about 20 s alone) that the signal lands mid-run; latest/ every 2 steps
PREEMPT = [*TINY_TRAIN, "trainer.epochs=20", "checkpoint.latest_every_steps=2"]


def test_scancel_term_checkpoints_and_the_resumed_job_is_bit_identical(slurm, tmp_path):
    aim = ["tracking=aim", f"tracking.repo={tmp_path / 'aim'}"]
    job = multirun(tmp_path, *PREEMPT, *aim, *launcher(slurm), wait=False)
    job_dir = tmp_path / "sweep" / "0"
    deadline = time.monotonic() + 180
    # the signal once latest/ is written and the Aim run is open (its record): a SIGTERM while the run is still
    # opening (a slow import on a loaded machine) ends within the stop budget and may leave no Aim run to mark
    while not (
        (job_dir / "checkpoints" / "latest" / "state.json").exists() and (job_dir / ".tcgexp-aim-run.json").exists()
    ):
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-3000:]
        time.sleep(0.2)
    job_id = slurm_job_id(job_dir)
    # no --batch/--full: SLURM signals the job step's tasks (submitit's `srun python -m submitit...`),
    # which is what a scheduler's preemption does; tcgexp's handler holds SIGTERM for the run
    subprocess.run(["scancel", "--signal=TERM", job_id], check=True)
    _, err = job.communicate(timeout=240)
    # the launcher saw the job end without a result (through sacct) and fails the sweep
    assert job.returncode != 0 and "has not produced any output (state: FAILED)" in err, err[-3000:]

    result = json.loads((job_dir / "result.json").read_text())
    assert result["status"] == "interrupted" and result["signal"] == "SIGTERM"
    state = json.loads((job_dir / "checkpoints" / "latest" / "state.json").read_text())
    assert 0 < state["progress"]["opt_steps"] == result["processed"]["optimizer_steps"]
    assert result["processed"]["optimizer_steps"] < result["planned"]["optimizer_steps"], "stopped mid-run"
    assert not (job_dir / ".cache_spill").exists()
    [row] = csv.DictReader(
        (tmp_path / "sweep" / "summary.csv").read_text().splitlines()
    )  # the run itself refreshed the report
    assert row["status"] == "INTERRUPTED"
    [log] = (tmp_path / "sweep" / ".submitit").rglob("*_log.err")
    assert f"interrupted by SIGTERM after optimizer step {state['progress']['opt_steps']}" in log.read_text()
    assert sacct_state(job_id) == "FAILED"  # exit status 143 = 128 + SIGTERM
    [run] = list(open_repo(tmp_path / "aim").iter_runs())
    assert run["status"] == "interrupted"

    # resume it as a SLURM job too: the checkpoint's own overrides come back, this command adds the launcher's
    res = multirun(tmp_path, f"resume={job_dir}", *launcher(slurm), sweep="resumed")
    assert res.returncode == 0, res.stderr[-3000:]
    done = json.loads((tmp_path / "resumed" / "0" / "result.json").read_text())
    assert done["status"] == "completed" and done["resumed_from"]
    assert done["processed"]["optimizer_steps"] == result["planned"]["optimizer_steps"]
    [run] = list(open_repo(tmp_path / "aim").iter_runs())  # the same Aim run, continued
    assert run["status"] == "completed" and run.hash == done["aim_hash"]

    # the same config uninterrupted, in this process: the same weights, bit for bit
    base = tmp_path / "base"
    train(compose_config(f"dataset.root={tmp_path / 'data'}", *PREEMPT), run_dir=base)
    assert weights(tmp_path / "resumed" / "0") == weights(base)


def test_a_requeued_job_continues_from_its_own_checkpoint(slurm, tmp_path):
    """`scontrol requeue` (what preemption with PreemptMode=REQUEUE and submitit's time-limit requeue do):
    SLURM stops the job (SIGTERM: latest/ written) and starts it again in the same run dir with
    SLURM_RESTART_COUNT=1; the run goes on from its own latest/ and the sweep completes, bit-identical."""
    job = multirun(tmp_path, *PREEMPT, *launcher(slurm), wait=False)
    job_dir = tmp_path / "sweep" / "0"
    state = job_dir / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 180
    while not state.exists():
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-3000:]
        time.sleep(0.2)
    job_id = slurm_job_id(job_dir)
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    _, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    done = json.loads((job_dir / "result.json").read_text())
    assert done["status"] == "completed" and done["resumed_from"], done["status"]
    assert done["processed"]["optimizer_steps"] == done["planned"]["optimizer_steps"]
    logs = "".join(p.read_text() for p in (tmp_path / "sweep" / ".submitit").rglob("*_log.err"))
    assert "requeued job (SLURM_RESTART_COUNT=1): continuing from its own checkpoint" in logs, logs[-3000:]
    base = tmp_path / "base"
    train(compose_config(f"dataset.root={tmp_path / 'data'}", *PREEMPT), run_dir=base)
    assert weights(job_dir) == weights(base)


def test_a_halving_sweep_runs_each_rung_as_slurm_jobs_and_promotes_exactly(slurm, tmp_path):
    """hydra/sweeper=halving on the real SLURM: a rung's trials are one job array (the launcher's batch),
    the promoted trial's next rung is a SLURM job of its own that continues its latest/."""
    from tests.sweep.conftest import SPACE, TRIAL

    res = multirun(
        tmp_path,
        "hydra/sweeper=halving",
        *TRIAL,
        *SPACE,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=3",
        f"tracking.repo={tmp_path / 'aim'}",
        *launcher(slurm),
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads((tmp_path / "sweep" / "trials.json").read_text())
    assert sorted(t["state"] for t in doc["trials"]) == ["complete", "pruned", "pruned"]
    [done] = [t for t in doc["trials"] if t["state"] == "complete"]
    result = json.loads((tmp_path / "sweep" / str(done["number"]) / "result.json").read_text())
    assert result["status"] == "completed" and result["resumed_from"] and len(result["history"]) == 3
    arrays = set()
    for t in doc["trials"]:
        job_id = slurm_job_id(tmp_path / "sweep" / str(t["number"]))  # the last SLURM job of the trial
        assert sacct_state(job_id) == "COMPLETED"
        if t["state"] == "pruned":
            arrays.add(job_id.split("_")[0])
    assert len(arrays) == 1, f"the first rung's trials were one job array: {arrays}"
    runs = {r["trial"]["number"]: r for r in open_repo(tmp_path / "aim").iter_runs()}
    assert sorted(runs) == [0, 1, 2] and runs[done["number"]]["trial"]["status"] == "complete"
