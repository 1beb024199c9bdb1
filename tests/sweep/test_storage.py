"""The study on a real database server (PostgreSQL, MariaDB: private instances on loopback, started here) and in
a journal file: a sweep stores its study there, and the same command with more trials continues it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_listening
from tests.sweep.conftest import SPACE, halving, study_of, trials

pytestmark = [pytest.mark.slow, pytest.mark.extra("sweep")]  # psycopg, PyMySQL


def as_owner(user: str, cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """`cmd` as `user` when we are root (database servers refuse to run as root), else as ourselves."""
    prefix = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120, **kw)


def private_dir(user: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"tcgexp-{user}-"))  # not under pytest's 0700 root-owned tmp
    if os.geteuid() == 0:
        shutil.chown(path, user, user)
    return path


@pytest.fixture(scope="module")
def postgres():
    """PostgreSQL from Debian (initdb, pg_ctl), one cluster of our own on a free port; yields its URL."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not bins:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    bindir, data, port = Path(bins[-1]).parent, private_dir("postgres"), free_port()
    res = as_owner("postgres", [str(bindir / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "tcgexp"])
    assert res.returncode == 0, res.stderr
    res = as_owner(
        "postgres",
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data / "db"),
            "-l",
            str(data / "log"),
            "-w",
            "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
            "start",
        ],
    )
    assert res.returncode == 0, res.stderr + (data / "log").read_text()
    try:
        createdb = str(bindir / "createdb") if (bindir / "createdb").exists() else "createdb"
        res = as_owner("postgres", [createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "tcgexp", "study"])
        assert res.returncode == 0, res.stderr
        yield f"postgresql+psycopg://tcgexp:unused@127.0.0.1:{port}/study"
    finally:
        as_owner("postgres", [str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "stop"])
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def mariadb():
    """MariaDB from Debian (scripts/slurm-local.sh installs it for SLURM's accounting): a server of our own,
    its own data dir and port, grant tables skipped; yields its URL."""
    server, install = shutil.which("mariadbd") or "/usr/sbin/mariadbd", shutil.which("mariadb-install-db")
    if not Path(server).exists() or install is None:
        pytest.skip("MariaDB is not installed (apt-get install mariadb-server)")
    data, port = private_dir("mysql"), free_port()
    res = as_owner(
        "mysql", [install, f"--datadir={data / 'db'}", "--auth-root-authentication-method=normal", "--skip-test-db"]
    )
    assert res.returncode == 0, res.stderr
    prefix = ["runuser", "-u", "mysql", "--"] if os.geteuid() == 0 else []
    proc = subprocess.Popen(
        [
            *prefix,
            server,
            "--no-defaults",
            f"--datadir={data / 'db'}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={data / 'sock'}",
            f"--pid-file={data / 'pid'}",
            "--skip-grant-tables",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc, "MariaDB")
        import pymysql

        with pymysql.connect(host="127.0.0.1", port=port, user="root") as conn:
            conn.cursor().execute("CREATE DATABASE study")
        yield f"mysql+pymysql://root:unused@127.0.0.1:{port}/study"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


ONE_RUNG = [
    "hydra.sweeper.min_epochs=1",
    "hydra.sweeper.max_epochs=1",
    "tracking=off",
    "hydra.sweeper.sampler=random",
    "hydra.sweeper.sampler_seed=0",
]


@pytest.mark.parametrize("server", ["postgres", "mariadb", "journal"])
def test_the_study_lives_in_its_storage_and_the_same_command_continues_it(request, tmp_path, server):
    url = str(tmp_path / "study.journal") if server == "journal" else request.getfixturevalue(server)
    storage = [f"hydra.sweeper.storage={url}", "hydra.sweeper.study_name=lr-search"]
    first = halving(tmp_path, *ONE_RUNG, *storage, "hydra.sweeper.n_trials=2", *SPACE)
    assert first.returncode == 0, first.stderr[-3000:]
    assert not (tmp_path / "sweep" / "optuna.db").exists()  # the study is where storage says
    if server != "journal":
        assert "unused" not in first.stderr and "***" in first.stderr  # the password is never printed
    again = halving(tmp_path, *ONE_RUNG, *storage, "hydra.sweeper.n_trials=3", *SPACE)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "continuing: 2 configurations there already" in again.stderr
    assert again.stdout.count("\t#") + again.stderr.count("\t#") == 1  # only the new configuration ran
    if server == "journal":
        import optuna
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        study = optuna.load_study(study_name="lr-search", storage=JournalStorage(JournalFileBackend(url)))
    else:
        study = study_of(tmp_path / "sweep", url)
    assert study.study_name == "lr-search" and [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert sorted(t["number"] for t in trials(tmp_path / "sweep")["trials"]) == [0, 1, 2]
    # another space on the same study is refused in one line, before any trial
    other = halving(tmp_path, *ONE_RUNG, *storage, "hydra.sweeper.n_trials=4", "model.hidden=choice(8,32)")
    assert other.returncode != 0 and "was run with other settings" in other.stderr.strip().splitlines()[-1]
