"""Aim problems cost tracking, never training: a garbage or corrupt ``.aim``, a read-only repo, the init
lock held by a stuck process, a server that accepts connections and never answers. Each run trains to
completion with one ``[tracking] ...; training continues without tracking`` line, a few seconds late at most."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tcgexp.track import JobContext
from tcgexp.track.aim_repo import INIT_LOCK, ensure_repo, prepare_repo
from tcgexp.track.aim_run import AimTracker

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["+experiment=smoke", "dataset.rows_per_day=1000", "cache=plan"]
EXTRA_SECONDS = 20  # generous: the bounds are 5 s (lock, silent server); a hang would be minutes
LINE = "training continues without tracking"


def train(data: Path, run_dir: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *SMOKE, f"dataset.root={data}", f"hydra.run.dir={run_dir}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return res, time.monotonic() - t0


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, float]:
    """The corpus, built once, and how long an untracked run on it takes here."""
    where = tmp_path_factory.mktemp("tracking_faults")
    res, _ = train(where / "data", where / "warm", "tracking=off")  # builds the corpus
    assert res.returncode == 0, res.stderr[-3000:]
    res, seconds = train(where / "data", where / "base", "tracking=off")
    assert res.returncode == 0, res.stderr[-3000:]
    return where / "data", seconds


def assert_trained_untracked(
    res: subprocess.CompletedProcess, seconds: float, run_dir: Path, base: float, why: str
) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if "[tracking]" in line]
    assert len(lines) == 1 and LINE in lines[0] and why in lines[0], res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["aim_hash"] is None
    assert seconds < base + EXTRA_SECONDS, f"{seconds:.1f} s against {base:.1f} s untracked"


def test_a_garbage_dot_aim_file_costs_tracking_not_training(tmp_path, baseline):
    data, base = baseline
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".aim").write_text("not a repo")
    res, seconds = train(data, tmp_path / "run", "tracking=aim", f"tracking.repo={repo}")
    assert_trained_untracked(res, seconds, tmp_path / "run", base, str(repo / ".aim"))


def aim_repo(repo):
    """A real, empty Aim repo at `repo`, made by Aim's own CLI."""
    repo.mkdir()
    # the `aim` beside this Python: the venv's, whether or not it is activated
    aim = str(Path(sys.executable).with_name("aim"))
    subprocess.run([aim, "init", "--repo", str(repo)], check=True, capture_output=True, timeout=120)
    return repo


def test_a_corrupt_dot_aim_dir_costs_tracking_not_training(tmp_path, baseline):
    data, base = baseline
    repo = aim_repo(tmp_path / "repo")
    (repo / ".aim" / "run_metadata.sqlite").write_text("garbage")  # SQLAlchemy's error spans several lines
    res, seconds = train(data, tmp_path / "run", "tracking=aim", f"tracking.repo={repo}")
    assert_trained_untracked(res, seconds, tmp_path / "run", base, str(repo))


@pytest.fixture
def read_only_repo(tmp_path):
    """A real Aim repo, bind-mounted read-only (as root, chmod would be ignored)."""
    repo = aim_repo(tmp_path / "ro_repo")
    if subprocess.run(["mount", "--bind", str(repo), str(repo)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(repo)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield repo
    finally:
        subprocess.run(["umount", str(repo)], capture_output=True)


def test_a_read_only_repo_costs_tracking_not_training(tmp_path, baseline, read_only_repo):
    data, base = baseline
    res, seconds = train(data, tmp_path / "run", "tracking=aim", f"tracking.repo={read_only_repo}")
    assert_trained_untracked(res, seconds, tmp_path / "run", base, str(read_only_repo))


@pytest.fixture
def held_lock(tmp_path):
    """Another process holding the repo's init lock and never letting go (killed at teardown)."""
    repo = tmp_path / "locked_repo"
    (repo / ".aim").mkdir(parents=True)
    code = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('locked', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(repo / ".aim" / INIT_LOCK)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield repo
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_an_init_lock_held_elsewhere_costs_tracking_not_training(tmp_path, baseline, held_lock):
    data, base = baseline
    res, seconds = train(data, tmp_path / "run", "tracking=aim", f"tracking.repo={held_lock}")
    assert_trained_untracked(res, seconds, tmp_path / "run", base, INIT_LOCK)


@pytest.fixture
def silent_server():
    """A TCP server on loopback that accepts every connection and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    held, stop = [], threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


def test_a_server_that_never_answers_costs_tracking_not_training(tmp_path, baseline, silent_server):
    data, base = baseline
    res, seconds = train(data, tmp_path / "run", "tracking=aim_remote", f"tracking.uri=aim://127.0.0.1:{silent_server}")
    assert_trained_untracked(res, seconds, tmp_path / "run", base, "no answer in 5 s")


def test_the_sweep_callbacks_repo_check_never_raises_nor_waits(tmp_path, held_lock, capfd):
    """ensure_repo (the sweep callback's, before any job) says the line and returns None."""
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / ".aim").write_text("x")
    t0 = time.monotonic()
    assert ensure_repo(garbage) is None and ensure_repo(held_lock) is None
    assert time.monotonic() - t0 < 15
    err = capfd.readouterr().err
    assert err.count(LINE) == 2 and str(garbage / ".aim") in err and INIT_LOCK in err


def test_making_the_repo_leaves_nothing_but_the_repo_in_the_users_folder(tmp_path):
    """The default repo is the launch folder: the init lock lives inside .aim, not beside the user's files."""
    (tmp_path / "notes.txt").write_text("mine")
    assert prepare_repo(tmp_path) == tmp_path and prepare_repo(tmp_path) == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == [".aim", "notes.txt"]


def test_a_tracker_that_could_not_start_records_nothing_and_raises_nothing(tmp_path, capfd):
    (tmp_path / ".aim").write_text("x")
    tracker = AimTracker(repo=str(tmp_path), experiment=None, hparams={}, context=JobContext(), keep_process=None)
    tracker.track({"train/loss": 1.0}, step=0)
    tracker.finish("completed")
    tracker.close()
    assert tracker.hash is None and capfd.readouterr().err.count("[tracking]") == 1


def test_a_tracker_whose_process_cannot_start_answers_at_once(tmp_path, capfd, monkeypatch):
    """The Aim child cannot be started (the process table full: EAGAIN, injected): one line, and its hash,
    read at every checkpoint, is None at once (it waited OPEN_SECONDS each time), as is close."""
    from tcgexp.track import aim_run

    def no_process(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(aim_run.subprocess, "Popen", no_process)
    t0 = time.monotonic()
    tracker = AimTracker(repo=str(tmp_path), experiment=None, hparams={}, context=JobContext(), keep_process=None)
    tracker.track({"train/loss": 1.0}, step=0)
    assert [tracker.hash for _ in range(3)] == [None] * 3
    tracker.close()
    assert time.monotonic() - t0 < 5, "waited for a run that could never open"
    assert capfd.readouterr().err.count("[tracking]") == 1


class ChildThatLosesItsRun(AimTracker):
    """A stand-in for the Aim child at the moment a full disk ends it: it opens the run (a hash), stops
    reading the job's lines (its end of the pipe closed, so the job's next write fails at once), then says why
    a moment later and exits, as ``remote.child`` does on an error."""

    CHILD = (
        "-c",
        "import json, os, sys, time\n"
        "sys.stdin.readline()\n"
        "print(json.dumps({'hash': 'h'}), flush=True)\n"
        "os.close(0)\n"
        "time.sleep(0.5)\n"
        "print(json.dumps({'lost': 'OSError: [Errno 28] No space left on device'}), flush=True)\n"
        "os._exit(0)\n",
    )


def test_a_lost_run_is_said_with_its_cause_even_when_the_pipe_breaks_first(tmp_path, capfd):
    """The job's write finds the child's pipe closed before the child's reason reaches the reader (CI saw it
    under load: the one line said "its process ended", not the full disk): the writer waits for the reason."""
    tracker = ChildThatLosesItsRun(
        repo=str(tmp_path), experiment=None, hparams={}, context=JobContext(), keep_process=None
    )
    assert tracker.hash == "h"
    time.sleep(0.2)  # the child has closed its stdin: the next line's write fails before its reason is said
    tracker.track({"train/loss": 1.0}, step=0)
    deadline = time.monotonic() + 10
    while "[tracking]" not in (err := capfd.readouterr().err) and time.monotonic() < deadline:
        time.sleep(0.05)
    tracker.close()
    said = [line for line in (err + capfd.readouterr().err).splitlines() if line.startswith("[tracking]")]
    assert len(said) == 1 and "No space left on device" in said[0], said


def test_a_database_error_is_said_by_its_cause_without_the_statement(tmp_path):
    """Aim's metadata lives in SQLite through SQLAlchemy, whose errors append the statement, its parameters and a
    link after the cause; the one line keeps the cause (a database that fills: SQLite's page limit, a real
    'database or disk is full')."""
    import sqlalchemy as sa

    from tcgexp.track.aim_repo import one_line

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'run_metadata.sqlite'}")
    with pytest.raises(sa.exc.OperationalError) as full, engine.begin() as db:
        db.execute(sa.text("CREATE TABLE run (hash TEXT, name TEXT)"))
        db.execute(sa.text("PRAGMA max_page_count = 3"))
        db.execute(sa.text("INSERT INTO run (hash, name) VALUES (:h, :n)"), {"h": "x" * 200, "n": "y" * 20000})
    assert "[SQL: " in str(full.value)
    said = one_line(f"could not start an Aim run at {tmp_path} ({type(full.value).__name__}: {full.value})")
    assert (
        said == f"could not start an Aim run at {tmp_path} (OperationalError: (sqlite3.OperationalError) "
        "database or disk is full)"
    )


def test_a_process_that_opened_an_aim_repo_and_run_ends_quietly(tmp_path):
    """Aim's exit hook starts a thread, which CPython 3.12.0-3.12.2 refuse at shutdown: every tracked process
    ended with a traceback there (aim_repo.exit_cleanup_in_place). Whatever the Python, nothing on stderr."""
    code = (
        "import sys; from tcgexp.track.aim_repo import prepare_repo; from tcgexp.track.aim_run import open_run;"
        "import aim; repo = str(prepare_repo(sys.argv[1]));"
        "run = open_run(aim, run_hash=None, repo=repo, experiment='x', attrs={}); run.track(1.0, name='m')"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr[-2000:]
