"""Every command tcgexp prints pastes into bash and runs, in a folder with spaces, quotes and non-ASCII letters.

In such a folder the halving sweep's ``best_command`` (``tracking.repo='.../uni dir ☃ ünï/aim ☃ repo'``) failed
in Hydra's lexer once bash had eaten its quotes, and ``tcgexp-report <dir>`` and ``aim up --repo <dir>`` split
the folder into several arguments. Here each printed command (the ``kill`` that stops a running sweep, the
``hydra.sweep.dir=`` that continues it, ``tcgexp-report``, ``aim up``, the re-run with seeds, ``best_command``
and a run's ``resume=``) is taken from what tcgexp printed and run through ``bash -c`` as printed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tcgexp.overrides import override
from tests.sweep.conftest import TRIAL, job_env
from tests.train.conftest import TINY_TRAIN

pytestmark = pytest.mark.slow  # sweeps, runs and an Aim UI in processes of their own
NAME = 'uni dir ☃ ünï, l\'été "q" $x'


def env() -> dict[str, str]:
    """This checkout's tcgexp, its console scripts (tcgexp-train, tcgexp-report, aim) first on PATH."""
    return {**job_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def bash(line: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """`line` as a user pastes it into bash."""
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)


def printed(pattern: str, text: str) -> str:
    found = re.findall(pattern, text, re.MULTILINE)
    assert found, f"{pattern!r} not printed:\n{text[-3000:]}"
    return found[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_printed_command_pastes_into_bash_and_runs(tmp_path):
    home = tmp_path / NAME
    home.mkdir()
    sweep, repo = home / "sweep", home / "aim ☃ repo"
    args = [
        "--multirun",
        "hydra/sweeper=halving",
        *TRIAL,
        "dataset.rows_per_day=60000",  # trials long enough (seconds each) to be stopped inside: 24,000 once ended first
        override("dataset.root", str(home / "data")),
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=1",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler=grid",  # both configurations, so the finding has no interval: the re-run is printed
        "optimizer.lr=choice(0.001,0.01)",
        "tracking=aim",
        override("tracking.repo", str(repo)),
    ]
    start = [sys.executable, "-m", "tcgexp.train", *args]
    first = subprocess.Popen(
        [*start, override("hydra.sweep.dir", str(sweep))],
        cwd=home,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (sweep / "0" / "checkpoints" / "latest").exists():  # trial 0's job is training
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0][-3000:]
        time.sleep(0.1)
    second = subprocess.run(
        [*start, override("hydra.sweep.dir", str(sweep))], cwd=home, env=env(), capture_output=True, text=True
    )
    assert second.returncode != 0
    kill = printed(r"\(or stop it: (kill -INT \d+)\)", second.stderr)
    assert bash(kill, home).returncode == 0
    stopped = first.communicate(timeout=300)[0]
    assert first.returncode == 130, stopped[-3000:]

    # the stop line's hydra.sweep.dir=<folder>, pasted after the rest of the command, continues the study
    word = printed(r"any command with (.+), however that folder is written", stopped)
    done = bash(shlex.join(["tcgexp-train", *args]) + " " + word, home)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stderr
    assert [t["state"] for t in json.loads((sweep / "trials.json").read_text())["trials"]] == ["complete"] * 2

    report = bash(printed(r"rebuild this report any time: (.+)$", said.rstrip()), home)
    assert report.returncode == 0 and "rebuild this report any time" in report.stderr, report.stderr[-3000:]

    port = free_port()
    ui = subprocess.Popen(
        ["bash", "-c", printed(r"what was swept: (aim up --repo .+), then open http", said) + f" --port {port}"],
        cwd=home,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert ui.poll() is None and time.monotonic() < deadline, ui.communicate()[0][-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.communicate(timeout=60)

    rerun = bash(printed(r"re-run the sweep with \d seeds: (.+)$", said), home)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    seeded = json.loads((home / "sweep-seeds3" / "trials.json").read_text())
    assert seeded["seeds"] == 3 and all(t["state"] != "failed" for t in seeded["trials"])

    best = OmegaConf.load(sweep / "optimization_results.yaml")
    straight = bash(best.best_command + " " + shlex.quote(override("hydra.run.dir", str(home / "best ☃"))), home)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert json.loads((home / "best ☃" / "result.json").read_text())["status"] == "completed"

    # a run's resume= after Ctrl-C
    run_dir = home / "run ☃ é"
    run = [*TINY_TRAIN, override("dataset.root", str(home / "data ☃")), "trainer.epochs=3"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tcgexp.train", *run, "checkpoint.latest_every_steps=1"]
        + [override("hydra.run.dir", str(run_dir))],
        cwd=home,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "latest" / "state.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err[-3000:]
    resumed = bash("tcgexp-train " + printed(r"continue with (.+)$", err), home)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [record] = [json.loads(p.read_text()) for p in (home / "outputs").rglob("result.json")]  # its own new folder
    assert record["status"] == "completed" and Path(record["resumed_from"]).parent.parent == run_dir, record
