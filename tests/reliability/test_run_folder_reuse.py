"""A run's own folders: used again by its resume and requeue, refused to another run, removed when it is refused.

Through the real command line and through ``train()``, on one tiny corpus built by a real run; a folder
tcgexp did not make is ``test_run_folders.py``'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tcgexp.errors import ConfigError
from tcgexp.lifecycle.rundir import RUN_MARKER, mark
from tcgexp.train import train
from tests.conftest import compose_config
from tests.reliability.folder_tools import ROOT, one_line_refusal, snapshot, tcgexp_train
from tests.train.conftest import TINY_TRAIN


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny corpus, built once by a real run."""
    base = tmp_path_factory.mktemp("folders")
    data = [f"dataset.root={base / 'data'}", *TINY_TRAIN]
    train(compose_config(*data, "trainer.epochs=1"), run_dir=base / "warm")
    return base, data


def test_a_folder_of_ours_is_used_again_resume_and_slurm_requeue(corpus, tmp_path):
    """A marked folder may be re-used: a SLURM requeue lands in its own run dir and continues from its
    latest/, and resume=<dir> into the same dir goes on too."""
    _, data = corpus
    run_dir = tmp_path / "job"
    first = tcgexp_train(*data, "trainer.max_steps=3", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (run_dir / RUN_MARKER).is_file() and json.loads((run_dir / "result.json").read_text())["status"] == "stopped"
    again = tcgexp_train(
        *data, "trainer.max_steps=6", f"hydra.run.dir={run_dir}", cwd=tmp_path, env={"SLURM_RESTART_COUNT": "1"}
    )
    assert again.returncode == 0 and "requeued job" in again.stderr, again.stderr[-3000:]
    r = json.loads((run_dir / "result.json").read_text())
    assert r["resumed_from"] and r["processed"]["optimizer_steps"] == 6
    last = tcgexp_train(f"resume={run_dir}", "trainer.max_steps=0", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert last.returncode == 0, last.stderr[-3000:]
    assert json.loads((run_dir / "result.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(
    "refusal, says",
    [
        ("tbptt.accum_steps=0", "tbptt.accum_steps"),  # validate()
        ("dataset.val_fraction=0.0", "dataset.val_fraction"),  # preflight
        ("optimized_metric=val/nope", "optimized_metric"),  # before train()
        ("resume=RUN_DIR_OF_NOTHING", "no checkpoint there"),  # a resume with nothing to resume
        ("dataset.dates=[2020-01-01]", "2020-01-01"),  # a day that is not built (DataError, after the corpus opens)
        ("model.hidden=1000000000", "model.hidden"),  # the memory estimate
    ],
    ids=["validate", "preflight", "metric", "resume", "data", "memory"],
)
@pytest.mark.parametrize("where", ["given", "default"])
def test_a_refused_run_leaves_no_folder_behind(corpus, refusal, says, where, tmp_path):
    """Neither a .hydra/ nor an empty train.log per refusal, nor the outputs/<date>/ above a default
    run dir; an existing folder above the run dir stays."""
    _, data = corpus
    (tmp_path / "outputs").mkdir()  # a user's outputs folder with another run's folder in it
    (tmp_path / "outputs" / "older").mkdir()
    refusal = refusal.replace("RUN_DIR_OF_NOTHING", str(tmp_path / "nothing"))
    args = [f"hydra.run.dir={tmp_path / 'outputs' / 'new' / 'run'}"] if where == "given" else []
    res = tcgexp_train(*data, refusal, *args, cwd=tmp_path)
    one_line_refusal(res, says)
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["older"], sorted(
        str(p) for p in (tmp_path / "outputs").rglob("*")
    )


@pytest.mark.parametrize("kind", ["file", "link"])
def test_something_else_where_a_runs_spill_root_goes_is_one_line_and_kept(corpus, kind, tmp_path):
    """<run dir>/.cache_spill a file, or a link to a user's folder, in a run dir of ours: one line, kept."""
    _, data = corpus
    run_dir = tmp_path / "run"
    mark(run_dir)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "rg-0-1.npz").write_bytes(b"a user's")
    if kind == "file":
        (run_dir / ".cache_spill").write_bytes(b"a user's")
    else:
        (run_dir / ".cache_spill").symlink_to(tmp_path / "mine")
    with pytest.raises(ConfigError, match=r"\.cache_spill is not a folder tcgexp made") as err:
        train(compose_config(*data), run_dir=run_dir)
    assert "\n" not in str(err.value)
    assert (tmp_path / "mine" / "rg-0-1.npz").read_bytes() == b"a user's"
    if kind == "link":
        assert (run_dir / ".cache_spill").is_symlink()
    else:
        assert (run_dir / ".cache_spill").read_bytes() == b"a user's"


def test_train_removes_the_folder_it_made_for_a_refused_run(corpus, tmp_path):
    _base, data = corpus
    with pytest.raises(Exception, match="2020-01-01"):
        train(compose_config(*data, "dataset.dates=[2020-01-01]"), run_dir=tmp_path / "new")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"  # an empty folder of the user's: used, and kept after a refusal
    kept.mkdir()
    with pytest.raises(Exception, match="2020-01-01"):
        train(compose_config(*data, "dataset.dates=[2020-01-01]"), run_dir=kept)
    assert kept.is_dir() and not list(kept.iterdir())


def test_a_new_run_into_a_finished_runs_folder_is_refused_and_that_run_kept(corpus, tmp_path):
    """`tcgexp-train hydra.run.dir=runs/a`, then the same with model.hidden=64: refused in one line saying how to
    resume it or start elsewhere; its result.json and checkpoints untouched; resume= into it still goes on."""
    _, data = corpus
    run_dir = tmp_path / "runs" / "a"
    first = tcgexp_train(*data, "trainer.epochs=1", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = snapshot(run_dir)
    res = tcgexp_train(*data, "trainer.epochs=1", "model.hidden=64", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    one_line_refusal(res, f"resume={run_dir}")
    assert "another run's result.json (status completed) and checkpoints (best, epoch_0001, latest)" in res.stderr
    assert snapshot(run_dir) == before, "the finished run's files changed"
    with pytest.raises(ConfigError, match="holds another run's"):  # train() called directly: the same claim
        train(compose_config(*data, "trainer.epochs=1"), run_dir=run_dir)
    assert snapshot(run_dir) == before


def test_a_resume_of_one_run_into_another_runs_folder_is_refused(corpus, tmp_path):
    """resume= continues its own run's folder; pointed at a third run's folder it would overwrite that one."""
    _, data = corpus
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        train(compose_config(*data, "trainer.max_steps=2"), run_dir=d)
    before = snapshot(b)
    with pytest.raises(ConfigError, match=r"holds another run's result.json \(status stopped\)"):
        train(compose_config(*data, f"resume={a}"), run_dir=b)
    assert snapshot(b) == before
    r = train(compose_config(*data, f"resume={a / 'checkpoints' / 'latest'}", "trainer.max_steps=3"), run_dir=a)
    assert r["processed"]["optimizer_steps"] == 3, "a resume into its own folder (named by its checkpoint) goes on"


@pytest.mark.parametrize(
    "inside",
    [
        "checkpoints/latest/run",
        "checkpoints/later",
        ".cache_spill/train/run",
        "checkpoints",  # the managed folders themselves (a run dir there was accepted)
        ".cache_spill",
        ".cache_spill.rank1",
        ".cache_spill.rank1/x",
    ],
)
def test_a_run_dir_inside_another_runs_managed_folders_is_refused(corpus, inside, tmp_path):
    _, data = corpus
    live = tmp_path / "live"
    mark(live)
    where = live / inside
    with pytest.raises(ConfigError, match="manages"):
        train(compose_config(*data, "trainer.max_steps=1"), run_dir=where)
    assert not (live / inside.split("/")[0]).exists(), "nothing made inside the other run's folder"
    (tmp_path / "link").symlink_to(live / "checkpoints", target_is_directory=True)  # through a link too
    with pytest.raises(ConfigError, match="manages"):
        train(compose_config(*data, "trainer.max_steps=1"), run_dir=tmp_path / "link" / "run")


@pytest.mark.slow
def test_two_runs_started_together_on_one_new_folder_leave_the_winners_files(corpus, tmp_path):
    """Started at the same moment on one new hydra.run.dir: one trains, the other is refused in one line, and
    the folder's .hydra/ names the winner's settings, not the loser's (the claim locks before Hydra writes)."""
    _, data = corpus
    for attempt in range(3):
        run_dir = tmp_path / f"shared{attempt}"
        procs = {
            lr: subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tcgexp.train",
                    *data,
                    f"optimizer.lr={lr}",
                    "trainer.max_steps=30",
                    f"hydra.run.dir={run_dir}",
                ],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            for lr in ("0.00123", "0.00456")
        }
        done = {lr: (p.wait(timeout=600), p.stderr.read()) for lr, p in procs.items()}
        winners = [lr for lr, (code, _) in done.items() if code == 0]
        assert len(winners) == 1, {lr: err[-1500:] for lr, (_, err) in done.items()}
        (loser,) = set(done) - set(winners)
        last = done[loser][1].strip().splitlines()[-1]
        assert last.startswith("error: ") and ("in use by another run" in last or "holds another run's" in last), last
        overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
        config = (run_dir / ".hydra" / "config.yaml").read_text()
        assert f"optimizer.lr={winners[0]}" in overrides and f"lr: {winners[0]}" in config, (overrides, config)
        assert loser not in overrides and loser not in config
