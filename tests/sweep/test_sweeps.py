"""Real halving sweeps: exact continuation, Aim runs per trial, the study, replicates, a diverging trial, and
a sweep stopped (SIGINT, SIGKILL) and run again."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time

import pytest
from omegaconf import OmegaConf

from tcgexp.sweep.space import overrides_of
from tcgexp.track.aim_repo import open_repo
from tcgexp.train import train
from tests.conftest import compose_config
from tests.reliability.test_kill import weights
from tests.sweep.conftest import ROOT, SPACE, TRIAL, halving, halving_cmd, job_env, study_of, trials

pytestmark = pytest.mark.slow
BUDGET = ["hydra.sweeper.min_epochs=1", "hydra.sweeper.max_epochs=3", "hydra.sweeper.eta=3"]


def test_a_promoted_trial_ends_bit_identical_to_training_straight(tmp_path):
    repo = tmp_path / "aim"
    res = halving(tmp_path, *BUDGET, "hydra.sweeper.n_trials=3", "tracking=aim", f"tracking.repo={repo}", *SPACE)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = trials(tmp_path / "sweep")
    [done] = [t for t in doc["trials"] if t["state"] == "complete"]  # 3 at rung 1, the best third goes on
    assert sorted(t["state"] for t in doc["trials"]) == ["complete", "pruned", "pruned"]
    assert doc["best"] == done["number"] and done["epochs"] == 3 and list(done["seed_values"]) == ["1", "3"]
    run_dir = tmp_path / "sweep" / str(done["number"])
    result = json.loads((run_dir / "result.json").read_text())
    assert result["resumed_from"] and result["status"] == "completed"  # rung 2 continued rung 1's latest/

    straight = train(
        compose_config(
            f"dataset.root={tmp_path / 'data'}",
            *TRIAL,
            "tracking=off",
            *overrides_of(done["params"]),
            "trainer.epochs=3",
        ),
        run_dir=tmp_path / "straight",
    )
    assert weights(run_dir) == weights(tmp_path / "straight")  # bit for bit
    assert done["value"] == straight["final"]["loss"] == result["final"]["loss"]

    best = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert best.name == "halving" and best.best_value == done["value"] and best.best_params == done["params"]
    assert best.best_command.startswith("tcgexp-train ") and "trainer.epochs=3" in best.best_command
    assert best.epochs_trained == 1 + 1 + 3 and best.epochs_at_full_budget == 9

    study = study_of(tmp_path / "sweep")
    states = {t.number: t.state.name for t in study.trials}
    assert sorted(states.values()) == ["COMPLETE", "PRUNED", "PRUNED"] and study.best_value == done["value"]
    assert study.best_trial.intermediate_values == {1: done["seed_values"]["1"][0], 3: done["value"]}

    runs = {r["trial"]["number"]: r for r in open_repo(repo).iter_runs()}  # one Aim run per trial, continued
    assert sorted(runs) == [0, 1, 2]
    for number, run in runs.items():
        want = "complete" if number == done["number"] else "pruned"
        assert run["trial"]["status"] == want and want in run.props.tags
        assert not {"promoted", "pruned", "complete"} - {want} & set(run.props.tags)
        rung = 1 if want == "complete" else 0
        assert run["trial"]["rung"] == rung and {t for t in run.props.tags if t.startswith("rung")} == {f"rung {rung}"}
        losses = next(m for m in run.metrics() if m.name == "val/loss").values.values_list()
        assert len(losses) == (3 if want == "complete" else 1)
    assert "**best**" in (tmp_path / "sweep" / "summary.md").read_text()
    assert (tmp_path / "sweep" / "summary.png").read_bytes()[:4] == b"\x89PNG"

    # the findings: the best against the runner-up at the rung both reached (1 epoch: the runner-up was pruned
    # there), one seed, so no interval and the command that re-runs the study with three in a new folder
    [row] = json.loads((tmp_path / "sweep" / "findings.json").read_text())
    assert (row["configuration"], row["epochs"], row["n"], row["verdict"]) == (
        "best vs runner-up at 1 epoch",
        1,
        1,
        "no interval",
    )
    assert row["best"].startswith(f"trial {done['number']} (") and row["metric"] == "val/loss"
    assert row["difference"] == pytest.approx(done["seed_values"]["1"][0] - float(row["vs_value"]))
    assert "hydra.sweeper.seeds=3" in row["rerun"] and f"hydra.sweep.dir={tmp_path / 'sweep'}-seeds3" in row["rerun"]
    said = [line for line in res.stderr.splitlines() if line.startswith("[sweep] ")]
    assert said[-1] == f"[sweep] rebuild this report any time: tcgexp-report {tmp_path / 'sweep'}"
    assert said[-2].startswith(f"[sweep] Aim, the runs coloured by what was swept: aim up --repo {repo}, then ")
    assert "RunStatusReporter" not in res.stderr and "writer thread" not in res.stderr  # Aim's INFO lines


def test_replicates_rank_on_the_mean_and_report_its_interval(tmp_path):
    res = halving(tmp_path, *BUDGET, "hydra.sweeper.n_trials=3", "hydra.sweeper.seeds=2", "tracking=off", *SPACE)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = trials(tmp_path / "sweep")
    for t in doc["trials"]:
        assert [os.path.basename(d) for d in t["run_dirs"]] == ["seed0", "seed1"]
        seeds = t["seed_values"][str(t["epochs"])]
        assert len(seeds) == 2 and seeds[0] != seeds[1] and t["value"] == pytest.approx(sum(seeds) / 2)
        assert t["interval"] > 0
        seed_of = [OmegaConf.load(f"{d}/.hydra/config.yaml").seed for d in t["run_dirs"]]
        assert seed_of == [0, 1]
    best = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert best.best_interval_95 > 0 and "(mean ± 95 %)" in (tmp_path / "sweep" / "summary.md").read_text()
    assert best.epochs_trained == 2 * (1 + 1 + 3)
    [row] = json.loads((tmp_path / "sweep" / "findings.json").read_text())  # seed by seed, at equal budget
    lo, hi = row["interval"]
    assert row["n"] == 2 and lo <= row["difference"] <= hi and "rerun" not in row
    assert row["verdict"] == ("better" if hi < 0 or lo > 0 else "within noise")


def test_a_diverging_trial_fails_and_the_study_goes_on(tmp_path):
    res = halving(
        tmp_path,
        *BUDGET,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler=grid",
        "tracking=off",
        "optimizer.lr=choice(1e-3,1e6,3e-3)",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = trials(tmp_path / "sweep")
    failed = [t for t in doc["trials"] if t["state"] == "failed"]
    assert [t["params"]["optimizer.lr"] for t in failed] == [1e6] and "diverged" in failed[0]["error"]
    assert f"trial {failed[0]['number']} failed" in res.stderr
    assert {t["state"] for t in doc["trials"]} == {"failed", "complete", "pruned"}
    assert "## Failed jobs" in (tmp_path / "sweep" / "summary.md").read_text()
    assert [t.state.name for t in study_of(tmp_path / "sweep").trials if t.params["optimizer.lr"] == 1e6] == ["FAIL"]


def test_the_same_command_without_a_sweep_dir_continues_its_study(tmp_path):
    """No hydra.sweep.dir: a halving sweep's folder is multirun/halving/<digest of the command>, so running the
    command again (with more trials, here) continues the same study; another search space is another study."""
    import sys

    base = [
        sys.executable,
        "-m",
        "tcgexp.train",
        "--multirun",
        "hydra/sweeper=halving",
        *BUDGET,
        "tracking=off",
        "hydra.sweeper.sampler=grid",
        f"dataset.root={tmp_path / 'data'}",
        "dataset.rows_per_day=500",
        "dataset.episodes_per_shard=2",
        "dataset.row_group_rows=128",
        "tbptt.batch_size=64",
    ]

    def sweep(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run([*base, *args], cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        return res

    sweep("hydra.sweeper.n_trials=2", "model.hidden=choice(8,16,32)")
    [folder] = (tmp_path / "multirun" / "halving").iterdir()
    assert [t["number"] for t in trials(folder)["trials"]] == [0, 1]
    again = sweep("hydra.sweeper.n_trials=3", "model.hidden=choice(8,16,32)")
    assert "continuing: 2 configurations there already" in again.stderr
    assert list((tmp_path / "multirun" / "halving").iterdir()) == [folder]
    assert sorted(t["params"]["model.hidden"] for t in trials(folder)["trials"]) == [8, 16, 32]  # one new
    sweep("hydra.sweeper.n_trials=1", "model.hidden=choice(8,16)")  # another space: another study, another folder
    assert len(list((tmp_path / "multirun" / "halving").iterdir())) == 2


def launched(output: str) -> list[str]:
    """The jobs a sweep launched, as Hydra's launcher logs them ("#N : overrides")."""
    return [line.split(" : ", 1)[1] for line in output.splitlines() if "\t#" in line and " : " in line]


def stopped_inside_trial_1(tmp_path, args: list[str], how: signal.Signals) -> tuple[int, str]:
    """Start the sweep, send `how` to its process group once trial 1 has a latest/; (exit code, output)."""
    proc = subprocess.Popen(
        halving_cmd(tmp_path, *args),
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    latest = tmp_path / "sweep" / "1" / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 300
    while not latest.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    os.killpg(proc.pid, how)  # the sweep and its jobs: Ctrl-C reaches the whole process group
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_stopped_sweep_continues_where_it_was(tmp_path, how):  # (joblib: the test below)
    """Stop the sweep inside trial 1's first rung; the same command continues it: trial 0's finished job is not
    run again, trial 1 resumes from its latest/, and the results equal an uninterrupted sweep's."""
    args = [
        *BUDGET,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler=grid",
        "tracking=off",
        "model.hidden=choice(8,16,32)",
        "trainer.aux_weight=0.25",
    ]
    slow = ["dataset.rows_per_day=3000"]  # a first rung long enough to stop inside
    code, out = stopped_inside_trial_1(tmp_path, [*args, *slow], how)
    assert code != 0
    if how == signal.SIGINT:
        assert "to continue the study" in out and "latest/ written" in out
    first = trials(tmp_path / "sweep")["trials"]
    assert [t["state"] for t in first][:2] == ["waiting", "running"], first
    done, stopped = (" ".join(overrides_of(t["params"])) for t in first[:2])

    again = halving(tmp_path, *args, *slow)
    assert again.returncode == 0, again.stderr[-3000:]
    jobs = launched(again.stdout + again.stderr)
    assert not any(done in j and "stop_at_epoch=1" in j for j in jobs), jobs  # finished: not run again
    assert next(j for j in jobs if stopped in j and "stop_at_epoch=1" in j).endswith(
        f"resume={tmp_path / 'sweep' / '1'}"
    )
    resumed = json.loads((tmp_path / "sweep" / "1" / "result.json").read_text())
    assert resumed["resumed_from"]

    whole = halving(tmp_path, *args, *slow, sweep="whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    a, b = (
        {str(t["params"]): (t["state"], t["value"]) for t in trials(tmp_path / d)["trials"]} for d in ("sweep", "whole")
    )
    assert a == b and all(math.isfinite(v) for _, v in a.values())  # the same study, to the bit


def test_ctrl_c_stops_a_joblib_sweep_and_the_same_command_continues_it(tmp_path):
    """joblib's workers get the Ctrl-C too and its pool breaks: the sweep stops all the same, once its jobs
    have written their latest/, and the same command resumes them."""
    args = [
        *BUDGET,
        "hydra.sweeper.n_trials=4",
        "tracking=off",
        "dataset.rows_per_day=3000",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "model.hidden=choice(8,16)",
        "tbptt.chunk=choice(4,8)",
    ]
    code, out = stopped_inside_trial_1(tmp_path, args, signal.SIGINT)
    assert code == 128 + signal.SIGINT and "to continue the study" in out, out[-3000:]
    again = halving(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert any(j.endswith(f"resume={tmp_path / 'sweep' / '1'}") for j in launched(again.stdout + again.stderr))
    states = [t["state"] for t in trials(tmp_path / "sweep")["trials"]]
    assert sorted(states) == ["complete", "pruned", "pruned", "pruned"]


def test_a_float_range_is_sampled_as_written_and_the_space_is_said(tmp_path):
    """range(0.1, 0.7, 0.2) is 0.1, 0.3 and 0.5 (its stop exclusive), and a trial gets 0.3, never its binary
    neighbour 0.30000000000000004; the sweep says the space it samples before its first trial."""
    res = halving(
        tmp_path,
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=1",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.sampler=random",
        "hydra.sweeper.sampler_seed=0",
        "tracking=off",
        "trainer.aux_weight=range(0.1,0.7,0.2)",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[sweep] space: trainer.aux_weight: 0.1, 0.3, 0.5 (from range(0.1,0.7,0.2): stop exclusive)" in res.stderr
    drawn = [t["params"]["trainer.aux_weight"] for t in trials(tmp_path / "sweep")["trials"]]
    assert set(drawn) <= {0.1, 0.3, 0.5} and 0.3 in drawn, drawn
