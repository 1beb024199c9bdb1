"""A run never harms a folder it did not make, and a refused run leaves no folder behind.

Through the real command line (Hydra's ``run_job`` writes ``.hydra/`` and the job log before the task
runs, so only a check before it can keep a user's folder untouched) and through ``train()``.
"""

from __future__ import annotations

import hashlib
import json
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
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def tcgexp_train(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (links not followed): its kind and, for files, its sha256."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            out[rel] = (
                ("link:" + os.readlink(p))
                if p.is_symlink()
                else ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            )
    return out


def users_results(folder: Path) -> Path:
    """A user's folder that looks like a run dir: the case that lost checkpoints/best/model.pt."""
    (folder / "checkpoints" / "best").mkdir(parents=True)
    (folder / "checkpoints" / "best" / "model.pt").write_bytes(b"weights of a month")
    (folder / "result.json").write_text('{"mine": true}')
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("my_app: {lr: 0.1}\n")  # their own Hydra app's
    return folder


def one_line_refusal(res: subprocess.CompletedProcess, names: str) -> None:
    assert res.returncode != 0, res.stdout[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], res.stderr[-3000:]


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
        "sys.argv[0] = 'tcgexp-train'; from tcgexp.train.__main__ import main; main()"
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
