"""tracking=aim: the run is a real Aim run, read back with Aim's own SDK."""

from __future__ import annotations

import json

import pytest
from aim.storage.context import Context
from omegaconf import OmegaConf

from tcgexp.schema import field_default
from tcgexp.track.aim_repo import open_repo
from tcgexp.train import train
from tcgexp.train.configs import TrainerConfig
from tests.conftest import assert_continued


def points_of(run, name: str, subset: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `name` as the Aim run holds them, in step order (read back with Aim's SDK)."""
    seq = run.get_metric(name, Context({"subset": subset}))
    seq.preload()
    steps, (values, _, _) = seq.data.items_list()
    return [int(s) for s in steps], list(values)


def steps_of(run, name: str, subset: str) -> list[int]:
    """The optimizer steps at which `name` was tracked in the Aim run."""
    return points_of(run, name, subset)[0]


def test_run_is_tracked_in_aim(train_cfg, tmp_path):
    cfg = train_cfg(
        "tracking=aim",
        f"tracking.repo={tmp_path / 'aimrepo'}",
        "tracking.experiment=unit",
        "trainer.epochs=1",
        "trainer.track_every=1",
    )
    result = train(cfg, run_dir=tmp_path / "run")
    repo = open_repo(tmp_path / "aimrepo")
    runs = list(repo.iter_runs())
    assert [r.hash for r in runs] == [result["aim_hash"]]
    run = runs[0]
    assert run.experiment == "unit"
    assert run["hparams"] == {**json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True))), "world_size": 1}
    assert run.name == "defaults" and run["swept"] == {} and run["status"] == "completed"
    # names as in the README, in Aim context {"subset": "train"} / {"subset": "val"} for grouping
    metrics = {(m.name, m.context.to_dict().get("subset")): m for m in run.metrics()}
    steps = result["processed"]["optimizer_steps"]
    for name in (
        "train/loss",
        "train/policy",
        "lr",
        "train/grad_norm",
        "cache_train/hits",
        "cache_train/misses",
        "cache_train/hit_rate_pct",
        "cache_train/bytes_loaded",
        "cache_train/bytes_moved",
        "cache_train/remote_bytes",
    ):
        assert (name, "train") in metrics, name
        assert len(metrics[name, "train"].values.values_list()) == steps, name
    for name in ("val/loss", "val/accuracy", "val/policy_early", "cache_val/hits"):
        assert len(metrics[name, "val"].values.values_list()) == 1, name
    assert {subset for name, subset in metrics if not name.startswith("__system__")} == {"train", "val"}
    assert len(run.get_metric("val/loss", Context({"subset": "val"})).values.values_list()) == 1


def test_a_resumed_run_continues_its_aim_run(train_cfg, tmp_path):
    repo = tmp_path / "aimrepo"
    first = train(train_cfg("tracking=aim", f"tracking.repo={repo}", "trainer.max_steps=5"), run_dir=tmp_path / "a")
    second = train(
        train_cfg("tracking=aim", f"tracking.repo={repo}", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b"
    )
    assert second["aim_hash"] == first["aim_hash"]
    runs = list(open_repo(repo).iter_runs())
    assert len(runs) == 1
    points = {m.name: m.values.values_list() for m in runs[0].metrics()}
    steps, every = second["processed"]["optimizer_steps"], int(train_cfg().trainer.track_every)
    ends = steps_of(runs[0], "val/loss", "val")  # each epoch's end
    want = sorted({s for s in range(1, steps + 1) if s % every == 0} | {5, *ends})  # the stop at 5 is flushed
    assert steps_of(runs[0], "train/loss", "train") == want and len(points["train/loss"]) == len(want)


def test_epochs_are_numbered_from_one_everywhere(train_cfg, tmp_path, capsys):
    """History, best epoch, the final line, Aim's epochs and epoch_NNNN/ all say the same epoch: the first is 1."""
    repo, run_dir = tmp_path / "aimrepo", tmp_path / "run"
    result = train(
        train_cfg("tracking=aim", f"tracking.repo={repo}", "trainer.epochs=3", "checkpoint.every_epochs=1"),
        run_dir=run_dir,
    )
    assert [h["epoch"] for h in result["history"]] == [1, 2, 3]
    best = result["best"]["epoch"]
    assert result["history"][best - 1]["val"]["loss"] == result["best"]["val_loss"]
    assert f"best {result['best']['val_loss']:.4f} at epoch {best};" in capsys.readouterr().out
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["best", "epoch_0001", "epoch_0002", "epoch_0003", "latest"]
    assert (ckpts / f"epoch_{best:04d}" / "model.safetensors").read_bytes() == (
        ckpts / "best" / "model.safetensors"
    ).read_bytes(), "best/ is the epoch the result names"
    run = next(open_repo(repo).iter_runs())
    epochs = {m.name: sorted(set(m.epochs.values_list())) for m in run.metrics()}
    assert epochs["val/loss"] == [1, 2, 3] and epochs["train/loss"] == [1, 2, 3]


def test_a_checkpoint_that_numbered_epochs_from_zero_resumes_renumbered(train_cfg, tmp_path):
    """state.json written before epochs were numbered from 1 (history and best_epoch from 0) still resumes."""
    from tests.reliability.test_checkpoint_integrity import reseal_state

    plan = train(train_cfg("trainer.epochs=2", "trainer.max_steps=1"), run_dir=tmp_path / "plan")["planned"]
    inside_second = plan["per_epoch_microbatches"][0] + 2  # accum_steps=1: a step per microbatch
    first = train(train_cfg("trainer.epochs=2", f"trainer.max_steps={inside_second}"), run_dir=tmp_path / "a")
    assert len(first["history"]) == 1, "stopped inside the second epoch"

    def as_before(progress: dict) -> None:
        progress.pop("epochs_from")
        progress["history"] = [{**h, "epoch": h["epoch"] - 1} for h in progress["history"]]
        progress["best_epoch"] -= 1

    reseal_state(tmp_path / "a" / "checkpoints" / "latest", as_before)
    resumed = train(train_cfg("trainer.epochs=2", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b")
    assert [h["epoch"] for h in resumed["history"]] == [1, 2] and resumed["best"]["epoch"] in (1, 2)
    assert_continued(resumed, inside_second)  # the renumbered checkpoint was read, not a run started again


def test_a_resumed_run_keeps_its_aim_identity_and_reports_its_own_throughput(tmp_path):
    """Through the command line, as a user resumes: `resume=<run dir>` alone. The Aim run keeps its name,
    overrides and experiment; rows/s counts this segment's rows over this segment's time."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.train.conftest import TINY_TRAIN

    repo_root = Path(__file__).resolve().parents[2]
    aim_repo = tmp_path / "aimrepo"

    def cli(*args: str) -> dict:
        res = subprocess.run(
            [sys.executable, "-m", "tcgexp.train", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(repo_root)},
        )
        assert res.returncode == 0, res.stderr[-3000:]
        run_dir = Path(args[-1].split("=", 1)[1])
        return json.loads((run_dir / "result.json").read_text())

    first = cli(
        *TINY_TRAIN,
        f"dataset.root={tmp_path / 'data'}",
        "tracking=aim",
        f"tracking.repo={aim_repo}",
        "model.hidden=24",
        "trainer.max_steps=6",
        f"hydra.run.dir={tmp_path / 'a'}",
    )
    run = next(open_repo(aim_repo).iter_runs())
    name, experiment, overrides = run.name, run.experiment, run["overrides"]
    assert "model.hidden=24" in name and experiment == f"run {tmp_path.name}/a"
    second = cli(f"resume={tmp_path / 'a'}", "trainer.max_steps=0", f"hydra.run.dir={tmp_path / 'b'}")
    runs = list(open_repo(aim_repo).iter_runs())
    assert len(runs) == 1 and second["aim_hash"] == first["aim_hash"]
    run = runs[0]
    assert (run.name, run.experiment, run["overrides"]) == (name, experiment, overrides)
    assert run["resumes"] == [[f"resume={tmp_path / 'a'}", "trainer.max_steps=0"]] and run["status"] == "completed"
    segment = second["segment"]
    assert segment["rows"] == second["processed"]["rows"] - first["processed"]["rows"] > 0
    assert second["rows_per_second"] == pytest.approx(
        segment["rows"] / (second["step_seconds"] + second["data_stall_seconds"])
    )
    assert first["segment"]["rows"] == first["processed"]["rows"]


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_whole_group_still_records_every_step_and_the_status(tmp_path, how):
    """Ctrl-C reaches every process of the terminal's foreground group, and scancel every process of a
    job step: the Aim run's own process among them. The run must still end "interrupted", holding every
    optimizer step the job made (the job stops at a safe point and says so; only then may its run close)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.train.conftest import TINY_TRAIN

    repo_root = Path(__file__).resolve().parents[2]
    aim_repo, run_dir = tmp_path / "aimrepo", tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.train",
        *TINY_TRAIN,
        f"dataset.root={tmp_path / 'data'}",
        "dataset.rows_per_day=6000",
        "trainer.epochs=50",
        "tracking=aim",
        f"tracking.repo={aim_repo}",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        start_new_session=True,
    )
    latest = run_dir / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 240
    while not latest.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    time.sleep(0.5)  # the Aim run open and some steps tracked
    os.killpg(proc.pid, getattr(signal, how))  # the job and its Aim process alike
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and f"interrupted by {how}" in err, err[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted"
    [run] = list(open_repo(aim_repo).iter_runs())
    assert run["status"] == "interrupted" and run.hash == result["aim_hash"]
    steps, every = result["processed"]["optimizer_steps"], field_default(TrainerConfig, "track_every")
    ends = steps_of(run, "val/loss", "val") if any(m.name == "val/loss" for m in run.metrics()) else []
    want = sorted({s for s in range(1, steps + 1) if s % every == 0} | {steps, *ends})  # the stop's step flushed
    assert steps > 0 and steps_of(run, "train/loss", "train") == steps_of(run, "cache_train/hits", "train") == want


def test_a_resumed_sweep_leaves_no_aim_repo_where_it_was_started(tmp_path):
    """`--multirun resume=<run dir>`: the job continues its Aim run where that run lives; the folder the
    command ran from gets no (empty) .aim/ of the default tracking.repo="." (ownership: we made nothing there)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.train.conftest import TINY_TRAIN

    repo_root = Path(__file__).resolve().parents[2]
    aim_repo, here = tmp_path / "aimrepo", tmp_path / "here"
    here.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run(
            [sys.executable, "-m", "tcgexp.train", *args],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(repo_root)},
        )
        assert res.returncode == 0, res.stderr[-3000:]
        return res

    cli(
        *TINY_TRAIN,
        f"dataset.root={tmp_path / 'data'}",
        "tracking=aim",
        f"tracking.repo={aim_repo}",
        "trainer.max_steps=3",
        f"hydra.run.dir={tmp_path / 'a'}",
    )
    cli("--multirun", f"resume={tmp_path / 'a'}", "trainer.max_steps=0", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert sorted(p.name for p in here.iterdir()) == [], "the command's folder is left as it was"
    done = json.loads((tmp_path / "sweep" / "0" / "result.json").read_text())
    [run] = list(open_repo(aim_repo).iter_runs())
    assert done["status"] == "completed" and run.hash == done["aim_hash"] and run["status"] == "completed"


@pytest.mark.parametrize("every", [1, 3, 7, 1000])
def test_the_cadence_tracks_every_step_it_selects_and_every_epochs_end_exactly(every, train_cfg, tmp_path):
    """trainer.track_every=n: the training values of optimizer steps n, 2n, ... and of each epoch's last step,
    nothing else and nothing lost; validation once an epoch; read back from the Aim run itself."""
    repo = tmp_path / "aimrepo"
    result = train(
        train_cfg("tracking=aim", f"tracking.repo={repo}", "trainer.epochs=2", f"trainer.track_every={every}"),
        run_dir=tmp_path / "run",
    )
    [run] = list(open_repo(repo).iter_runs())
    ends = steps_of(run, "val/loss", "val")  # each epoch's last optimizer step
    steps = result["processed"]["optimizer_steps"]
    assert len(ends) == 2 and ends[-1] == steps and 0 < ends[0] < steps
    want = sorted({s for s in range(1, steps + 1) if s % every == 0} | set(ends))
    for name in ("train/loss", "lr", "cache_train/hits"):
        assert steps_of(run, name, "train") == want, name
        assert all(v is not None for v in points_of(run, name, "train")[1])
    assert [round(v, 6) for v in points_of(run, "val/loss", "val")[1]] == [
        round(h["val"]["loss"], 6) for h in result["history"]
    ]


READ_BACK = """
import json, sys
from aim.storage.context import Context
from tcgexp.track.aim_repo import open_repo
[run] = [r for r in open_repo(sys.argv[1]).iter_runs() if r.hash == sys.argv[2]]
seq = run.get_metric("train/loss", Context({"subset": "train"}))
seq.preload()
steps, (values, _, _) = seq.data.items_list()
print(json.dumps({"status": run["status"], "active": run.active, "points": [[int(s) for s in steps], list(values)]}))
"""


def test_the_jobs_of_a_sweep_in_one_process_share_one_aim_process(tmp_path):
    """A sweep's job hands its Aim process, its run closed, to the next job in the same process (no second
    import of Aim, no second opening of the repo): each job's run is whole and closed when its job ends, read
    by another process (this one's Aim caches what it read of the repo before)."""
    import subprocess
    import sys

    from tcgexp.track import JobContext, aim_run

    pids, hashes = [], []
    for job in range(3):
        context = JobContext(sweep_id="s", sweep_dir=str(tmp_path), job_num=job, overrides=[f"seed={job}"])
        tracker = aim_run.AimTracker(
            repo=str(tmp_path), experiment="sweep", hparams={"seed": job}, context=context, keep_process=None
        )
        pids.append(tracker.proc.pid)
        for step in range(1, 4):
            tracker.track({"train/loss": float(job + step)}, step=step, epoch=1)
        tracker.finish("completed")
        hashes.append(tracker.hash)
        tracker.close()
        read = subprocess.run(
            [sys.executable, "-c", READ_BACK, str(tmp_path), hashes[-1]], capture_output=True, text=True, timeout=120
        )
        assert read.returncode == 0, read.stderr[-3000:]
        assert json.loads(read.stdout) == {
            "status": "completed",
            "active": False,
            "points": [[1, 2, 3], [job + 1.0, job + 2.0, job + 3.0]],
        }
    assert len(set(pids)) == 1 and len(set(hashes)) == 3
    [(_, spare)] = aim_run._SPARE
    spare.stdin.close()  # what this process's exit does: the spare ends, holding no run
    assert spare.wait(timeout=30) == 0
    aim_run._SPARE.clear()
