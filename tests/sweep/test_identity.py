"""A study is one study: however its folder is written it continues, each trial's folder proves what it trained,
a changed space is refused naming the difference, and two sweeps never run one folder at once.

Real sweeps (``tcgexp-train --multirun hydra/sweeper=halving``) in subprocesses on a tiny corpus."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf

from tests.sweep.conftest import job_env, trials

pytestmark = pytest.mark.slow

BASE = [
    "--multirun",
    "hydra/sweeper=halving",
    "hydra.sweeper.min_epochs=1",
    "hydra.sweeper.max_epochs=1",
    "tracking=off",
    "dataset.rows_per_day=400",
    "dataset.episodes_per_shard=2",
    "dataset.row_group_rows=128",
    "tbptt.batch_size=64",
    "dataset.workers=1",
]


def sweep(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *BASE, f"dataset.root={cwd / 'data'}", *args],
        cwd=cwd,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def refused(res: subprocess.CompletedProcess) -> str:
    """The one error line of a refused sweep (the sweep report's own lines may follow it)."""
    assert res.returncode != 0, res.stderr[-3000:]
    lines = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    return lines[0]


def trained(run_dir: Path, keys) -> dict:
    """What the folder's checkpoint trained, read from its own resolved config."""
    state = json.loads((run_dir / "checkpoints" / "latest" / "state.json").read_text())
    cfg = OmegaConf.create(state["config"])
    return {k: OmegaConf.select(cfg, k) for k in keys}


def studies(db: Path) -> list[str]:
    return optuna.get_all_study_names(f"sqlite:///{db}")


def test_a_folder_written_any_way_continues_its_one_study_and_every_result_is_what_its_folder_trained(tmp_path):
    """A study named by its folder as typed (as tcgexp named them before), whose trial folders carry no stamp:
    the same folder given absolute, then through a link, continues that study; one study stays in optuna.db, and
    every reported trial's parameters are what its folder trained (best_params and best_command included)."""
    space = ["model.hidden=choice(8,16,32,48)", "hydra.sweeper.sampler=random", "hydra.sweeper.sampler_seed=3"]
    typed = "multirun/halving/typed"
    ok(
        sweep(
            tmp_path,
            *space,
            "hydra.sweeper.n_trials=2",
            f"hydra.sweep.dir={typed}",
            f"hydra.sweeper.study_name={typed}",
        )
    )
    folder = (tmp_path / typed).resolve()
    for stamp in folder.glob("*/.tcgexp-trial.json"):
        stamp.unlink()  # a folder from before stamps: its recorded overrides prove what it trained
    again = ok(sweep(tmp_path, *space, "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={folder}"))
    assert f"continuing study '{typed}'" in again.stderr and "continuing: 2 configurations" in again.stderr
    (tmp_path / "link").symlink_to(folder)
    ok(sweep(tmp_path, *space, "hydra.sweeper.n_trials=4", f"hydra.sweep.dir={tmp_path / 'link'}"))
    assert studies(folder / "optuna.db") == [typed]
    rows = trials(folder)["trials"]
    assert [t["number"] for t in rows] == [0, 1, 2, 3]
    for t in rows:
        run_dir = folder / str(t["number"])
        assert trained(run_dir, t["params"]) == t["params"], t
        assert json.loads((run_dir / ".tcgexp-trial.json").read_text())["params"] == t["params"]
    best = OmegaConf.load(folder / "optimization_results.yaml")
    [run_dir] = best.best_run_dirs
    assert trained(Path(run_dir), best.best_params) == dict(best.best_params)
    assert f"model.hidden={best.best_params['model.hidden']}" in best.best_command


def test_a_trial_folder_that_trained_other_params_is_refused_never_adopted(tmp_path):
    """Two studies in one folder (an earlier tcgexp made them when the folder was written two ways): the sweep
    refuses to choose, naming both; continuing the second by name refuses its trial 0, whose folder trained
    another configuration of the first, and reports nothing."""
    space = ["model.hidden=choice(8,16,32,48)", "hydra.sweeper.sampler=random"]
    folder = tmp_path / "sweep"
    ok(sweep(tmp_path, *space, "hydra.sweeper.sampler_seed=1", "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={folder}"))
    first = trials(folder)["trials"][0]["params"]
    seed = next(
        s
        for s in range(2, 50)
        if optuna.samplers.RandomSampler(seed=s).sample_independent(
            None, None, "model.hidden", optuna.distributions.CategoricalDistribution([8, 16, 32, 48])
        )
        != first["model.hidden"]
    )
    command = [
        *space,
        f"hydra.sweeper.sampler_seed={seed}",
        "hydra.sweeper.n_trials=1",
        "hydra.sweep.dir=sweep",
        "hydra.sweeper.study_name=sweep",
    ]
    # a new study named by the folder as typed: refused before it is created (it used to be, with a trial)
    line = refused(sweep(tmp_path, *command))
    assert "holds trial 0 of study" in line and "nothing was adopted" in line and "model.hidden" in line, line
    assert studies(folder / "optuna.db") == [str(folder.resolve())]
    # the second study an earlier tcgexp opened (the folder as typed, relative to the launch folder), its trial 0
    # asked with another configuration
    url = f"sqlite:///{folder / 'optuna.db'}"
    first_settings = optuna.load_study(study_name=str(folder.resolve()), storage=url).user_attrs["tcgexp_halving"]
    legacy = optuna.create_study(study_name="sweep", storage=url)
    legacy.set_user_attr("tcgexp_halving", {**first_settings})
    other = {"model.hidden": next(h for h in (8, 16, 32, 48) if h != first["model.hidden"])}
    legacy.enqueue_trial(other)
    asked = legacy.ask({"model.hidden": optuna.distributions.CategoricalDistribution([8, 16, 32, 48])})
    assert asked.params == other
    asked.set_user_attr(
        "tcgexp",
        {"rung": 0, "state": "running", "promoted": False, "run_dirs": [str(folder / "0")], "values": {}},
    )
    before = tree(folder)
    line = refused(sweep(tmp_path, *command))
    assert "holds trial 0 of study" in line and "nothing was adopted" in line and "model.hidden" in line, line
    assert tree(folder) == before  # refused before anything was written
    assert trained(folder / "0", first) == first
    assert sorted(studies(folder / "optuna.db")) == sorted([str(folder.resolve()), "sweep"])
    line = refused(sweep(tmp_path, *space, "hydra.sweeper.n_trials=1", "hydra.sweep.dir=sweep"))
    assert "2 studies name the sweep dir" in line and "hydra.sweeper.study_name=" in line, line
    assert not (folder / "1").exists() and trials(folder)["trials"][0]["params"] == first


def test_a_changed_space_in_a_named_folder_is_refused_naming_the_difference(tmp_path):
    ok(sweep(tmp_path, "model.hidden=choice(8,16)", "hydra.sweeper.n_trials=1", "hydra.sweep.dir=named"))
    before = tree(tmp_path)
    for changed in ("model.hidden=choice(16,8)", "model.hidden=choice(8,32)", "model.hidden=choice(8,16,32)"):
        line = refused(sweep(tmp_path, changed, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={tmp_path / 'named'}"))
        assert "was run with other settings" in line and changed.split("=", 1)[1] in line, line
        assert tree(tmp_path) == before, "a refused command writes nothing (multirun.yaml, the lock, the study)"
    assert len(trials(tmp_path / "named")["trials"]) == 1


def test_a_second_start_of_a_running_study_is_refused_naming_its_process(tmp_path):
    """Two identical commands at once: the second is refused in one line naming the first's pid, and the first
    records every trial as its folder trained it."""
    args = [
        "model.hidden=choice(8,16)",
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_trials=2",
        "dataset.rows_per_day=1500",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    ok(sweep(tmp_path, *args[:-1], "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={tmp_path / 'warm'}"))  # the corpus
    first = subprocess.Popen(
        [sys.executable, "-m", "tcgexp.train", *BASE, f"dataset.root={tmp_path / 'data'}", *args],
        cwd=tmp_path,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = tmp_path / "sweep" / ".tcgexp-sweep.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
        time.sleep(0.05)
    line = refused(sweep(tmp_path, *args))
    assert f"pid {first.pid}" in line and "is running" in line, line
    _out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    rows = trials(tmp_path / "sweep")["trials"]
    assert [t["state"] for t in rows] == ["complete", "complete"], rows  # one rung: every trial completes
    for t in rows:
        assert trained(tmp_path / "sweep" / str(t["number"]), t["params"]) == t["params"]
    assert os.path.exists(tmp_path / "sweep" / "optuna.db")


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every file and folder under `folder`, with each file's bytes."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def test_a_moved_sweep_folder_is_refused_and_the_refusal_writes_nothing(tmp_path):
    """A sweep folder moved and continued under its new path is refused in one line, and the refused command
    (each retry too) leaves every file as it was, the study database included (it used to add a second study with
    one trial to optuna.db at every try); the study it names continues there."""
    space = ["model.hidden=choice(8,16,32)", "hydra.sweeper.sampler=random", "hydra.sweeper.sampler_seed=0"]
    ok(sweep(tmp_path, *space, "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={tmp_path / 'was'}"))
    old = str((tmp_path / "was").resolve())
    (tmp_path / "was").rename(tmp_path / "moved")
    folder = tmp_path / "moved"
    before = tree(tmp_path)
    for _ in range(2):
        line = refused(sweep(tmp_path, *space, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={folder}"))
        assert studies(folder / "optuna.db") == [old]
        assert tree(tmp_path) == before
        assert "nothing was adopted and nothing written" in line and f"study {old!r}" in line, line
    advice = line.split("continue that study here with ", 1)[1].split(" (a folder moved", 1)[0]
    [study_name] = shlex.split(advice)  # the override the line gives, as a shell reads it
    ok(sweep(tmp_path, *space, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={folder}", study_name))
    assert studies(folder / "optuna.db") == [old]
    assert [t["state"] for t in trials(folder)["trials"]] == ["complete", "complete"]


def test_a_refused_sweep_writes_nothing_in_the_folder_it_was_started_from(tmp_path):
    """A halving sweep refused before its first trial (a contradictory space), with the default tracking: its
    launch folder stays empty (the sweep callback made the Aim repo there before the sweeper could refuse)."""
    launch = tmp_path / "launch"
    launch.mkdir()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "--multirun",
            "hydra/sweeper=halving",
            f"dataset.root={tmp_path / 'data'}",
            "optimizer.lr=interval(1e-2,1e-4)",
        ],
        cwd=launch,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "needs low < high" in refused(res)
    assert list(launch.iterdir()) == [] and not (tmp_path / "data").exists()
