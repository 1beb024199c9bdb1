"""A run never harms a folder it did not make: a user's folder, a place no run belongs, a plug-in that cannot work.

Through the real command line (Hydra's ``run_job`` writes ``.hydra/`` and the job log before the task
runs, so only a check before it can keep a user's folder untouched) and through ``train()``; a run's own
folders (used again, another run's refused, a refused run's removed) are ``test_run_folder_reuse.py``'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tcgexp.errors import ConfigError
from tcgexp.lifecycle.rundir import RUN_MARKER, SWEEP_MARKER, mark
from tcgexp.ownership import HeldLock
from tcgexp.train import train
from tests.conftest import compose_config
from tests.reliability.folder_tools import ROOT, one_line_refusal, snapshot, tcgexp_train, users_results
from tests.train.conftest import TINY_TRAIN


@pytest.mark.parametrize("layout", ["results", "only-hydra", "nested", "link", "sweep", "sweep-job-folder"])
def test_a_users_folder_is_refused_before_hydra_writes_anything(layout, tmp_path):
    """Nothing in it deleted or overwritten, .hydra/ included; one line naming the folder."""
    mine = tmp_path / "mine"
    mine.mkdir()
    args, named = [f"hydra.run.dir={mine}"], str(mine)
    if layout == "results":
        users_results(mine)
    elif layout == "only-hydra":  # a folder another Hydra app made: not ours for having a .hydra/
        (mine / ".hydra").mkdir()
        (mine / ".hydra" / "config.yaml").write_text("their: app\n")
    elif layout == "nested":
        users_results(mine / "a" / "b")
        args, named = [f"hydra.run.dir={mine / 'a' / 'b'}"], str(mine / "a" / "b")
    elif layout == "link":  # the run dir is a link to the user's folder
        users_results(mine / "target")
        (tmp_path / "link").symlink_to(mine / "target")
        args, named = [f"hydra.run.dir={tmp_path / 'link'}"], str(tmp_path / "link")
    elif layout == "sweep":
        users_results(mine)
        args = ["--multirun", f"hydra.sweep.dir={mine}", "model.hidden=8,16"]
    else:  # a sweep dir of ours whose job folder 0/ is the user's
        (mine / SWEEP_MARKER).write_text("{}")
        users_results(mine / "0")
        args, named = ["--multirun", f"hydra.sweep.dir={mine}", "model.hidden=8,16"], "0/"
    before = snapshot(tmp_path)
    res = tcgexp_train(*args, "tracking=off", f"dataset.root={tmp_path / 'data'}", cwd=tmp_path)
    one_line_refusal(res, named)
    assert "tcgexp did not write" in res.stderr
    assert snapshot(tmp_path) == before, "something in the user's folder changed"


@pytest.mark.parametrize("where", ["/", "home", "/etc", "/usr/local/tcgexp-run", "/var/lib/tcgexp-run", "/tmp"])
def test_root_home_and_system_folders_are_refused_with_nothing_written(where, tmp_path):
    where = str(Path.home()) if where == "home" else where
    existed = Path(where).exists()
    res = tcgexp_train(f"hydra.run.dir={where}", "tracking=off", f"dataset.root={tmp_path / 'data'}", cwd=tmp_path)
    one_line_refusal(res, f"hydra.run.dir={where}")
    if existed:  # (others write into /tmp meanwhile: what a run would have written is looked for by name)
        assert not any((Path(where) / name).exists() for name in (".hydra", RUN_MARKER, "train.log"))
    else:
        assert not Path(where).exists()
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_a_file_where_the_run_dir_goes_is_one_line(where, tmp_path):
    (tmp_path / "result.json").write_text("{}")
    run_dir = tmp_path / "result.json" / ("x" if where == "under-a-file" else "")
    res = tcgexp_train(f"hydra.run.dir={run_dir}", "tracking=off", cwd=tmp_path)
    one_line_refusal(res, "is a file, not a folder")
    assert (tmp_path / "result.json").read_text() == "{}"


def test_a_live_runs_folder_is_refused_before_its_hydra_files_are_rewritten(tmp_path):
    run_dir = tmp_path / "run"
    mark(run_dir)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text("the live run's\n")
    lock = HeldLock(run_dir / ".tcgexp-run.lock", "run")  # held here, as the live run holds it
    assert lock.acquire() is None
    try:
        res = tcgexp_train(f"hydra.run.dir={run_dir}", "tracking=off", cwd=tmp_path)
    finally:
        lock.release()
    one_line_refusal(res, "is in use by another run")
    assert (run_dir / ".hydra" / "config.yaml").read_text() == "the live run's\n"


def test_train_refuses_an_unmarked_folder_with_outputs_and_leaves_it_alone(tmp_path):
    mine = users_results(tmp_path / "mine")
    before = snapshot(mine)
    with pytest.raises(ConfigError, match=r"hydra.run.dir=.*mine already holds files tcgexp did not write"):
        train(compose_config(f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN), run_dir=mine)
    assert snapshot(mine) == before


# -- a launcher or sweeper that cannot work here: one line with the fix, and no sweep dir -------------------


def path_without(*tools: str) -> str:
    """PATH with every folder that holds one of `tools` left out (SLURM's client absent)."""
    import shutil

    keep = [d for d in os.environ["PATH"].split(os.pathsep) if not any(shutil.which(t, path=d) for t in tools)]
    return os.pathsep.join(keep)


@pytest.mark.parametrize(
    "plugin, says",
    [
        ("hydra/sweeper=optuna", "use hydra/sweeper=halving"),
        ("hydra/launcher=submitit_slurm", "srun are not on PATH"),
        ("hydra/launcher=ray", 'pip install -e ".[ray]"'),
    ],
    ids=["optuna-plugin-missing", "srun-absent", "ray-missing"],
)
def test_a_missing_launcher_or_sweeper_is_one_line_with_the_install_hint(plugin, says, tmp_path):
    if plugin.endswith("optuna"):
        import importlib.util

        if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None:
            pytest.skip("hydra-optuna-sweeper is installed here")
    env = {"PATH": path_without("srun", "sbatch")}
    # Ray's absence: the interpreter is told the module does not exist (Ray itself is a test dependency)
    code = (
        "import sys; sys.modules['ray'] = None if 'ray' in sys.argv[-1] else sys.modules.get('ray'); "
        "sys.argv[0] = 'tcgexp-train'; from tcgexp.cli.train import main; main()"
    )
    sweep = tmp_path / "sweep"
    res = subprocess.run(
        [sys.executable, "-c", code, "--multirun", "tracking=off", f"hydra.sweep.dir={sweep}", plugin],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )
    one_line_refusal(res, says)
    assert not sweep.exists(), "nothing written for a sweep that cannot start"


# -- a folder belongs to one run --------------------------------------------------------------------------


def claim_in_step(root: str, folders: int, barrier, refusals) -> None:
    """One of two processes claiming the same new folders at the same moments (check, then mark)."""
    from tcgexp.lifecycle.rundir import check

    for i in range(folders):
        barrier.wait()
        try:
            check(Path(root) / f"run{i}", hydra_made=False)
            mark(Path(root) / f"run{i}", hydra_made=False)
        except ConfigError as exc:
            refusals.put(str(exc))
    refusals.put(None)


def test_a_marker_made_while_another_claim_looks_is_never_taken_for_a_foreign_file(tmp_path):
    """Two claims of one new folder, in step, 400 times: the one that looked for the marker before the other made
    it and listed the folder after once saw ".tcgexp-run" as a file tcgexp did not write (CI, 2026-12-05; 11 of
    800 claims here before the fix). Only the lock decides between them (the test above); the check never does."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, refusals = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=claim_in_step, args=(str(tmp_path), 400, barrier, refusals)) for _ in range(2)]
    for proc in procs:
        proc.start()
    said, ended = [], 0
    while ended < 2:
        item = refusals.get(timeout=120)
        ended += item is None
        said += [item] if item is not None else []
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert said == [], said[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"run{i}" for i in range(400))
