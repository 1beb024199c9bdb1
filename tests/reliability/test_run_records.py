"""Every ending leaves its record, and every override tcgexp writes back means what the user typed.

- A run that claimed its folder and stopped on an error mid-run writes result.json (status failed, the error)
  (a checkpoint that cannot be written: tests/reliability/test_disk.py);
- a run SIGKILLed (as the kernel's OOM killer does) leaves no record of its own: the next run in its folder
  says what happened, once, and a run that ended any other way is never taken for killed;
- ``resume=`` and a halving sweep's own overrides round-trip any path a user can quote (spaces, quotes,
  non-ASCII letters, commas, ``=``, brackets, backslashes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from tcgexp.errors import ConfigError
from tcgexp.overrides import override
from tcgexp.train import train
from tests.conftest import compose_config
from tests.sweep.conftest import halving_cmd, job_env, trials
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[2]
PATHS = [
    "/data/my runs/a",
    "/data/été/run",
    "/data/it's",
    '/data/say "hi"',
    "/data/a,b",
    "/data/a=b",
    "/data/[x]",
    "/data/{x}",
    "/data/back\\slash",
    "/data/end\\",
    "/data/q\\'x",
    "C:\\dir\\",
    " lead",
    "trail ",
    "12",
    "true",
    "null",
    "1e-3",
    "a:b",
    "~/x",
    "$HOME/x",
    "x#y",
    "x%y",
    "日本/ラン",
]


@pytest.mark.parametrize("value", PATHS, ids=range(len(PATHS)))
def test_an_override_tcgexp_writes_reads_back_the_same_value(value):
    line = override("resume", value)
    assert OverridesParser.create().parse_override(line).value() == value, line


@pytest.mark.parametrize("value", [0, 7, -3, 0.001, 1e-30, True, False])
def test_numbers_and_booleans_stay_bare(value):
    line = override("seed", value)
    back = OverridesParser.create().parse_override(line).value()
    assert back == value and type(back) is type(value) and "'" not in line, line


def tcgexp_train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=job_env(),
    )


@pytest.mark.slow
def test_a_resume_from_a_folder_whose_name_needs_quoting(tmp_path):
    """`resume="'<dir with spaces, quotes and accents>'"` as a user quotes it: composes again (tcgexp re-emits
    it quoted) and continues."""
    run_dir = tmp_path / "my runs" / "été, l'autre"
    data = [f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "trainer.epochs=2"]
    first = tcgexp_train(*data, "trainer.max_steps=2", override("hydra.run.dir", str(run_dir)), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = tcgexp_train(
        override("resume", str(run_dir)), "trainer.max_steps=0", override("hydra.run.dir", str(run_dir)), cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr[-3000:]
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "completed" and Path(record["resumed_from"]).parent.parent == run_dir


@pytest.mark.slow
def test_a_halving_sweep_in_a_folder_whose_name_needs_quoting(tmp_path):
    """Every job of a halving sweep gets its sweep dir, run dir and resume= back as typed: none fails."""
    sweep = tmp_path / "l'été, à la plage"
    cmd = [
        *halving_cmd(
            tmp_path,
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.max_epochs=3",
            "hydra.sweeper.eta=3",
            "optimizer.lr=choice(0.001,0.01,0.003)",
        ),
        override("hydra.sweep.dir", str(sweep)),
    ]
    cmd = [a for a in cmd if not a.startswith(f"hydra.sweep.dir={tmp_path / 'sweep'}")]  # as the user quotes it
    res = subprocess.run(cmd, cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    got = trials(sweep)
    assert [t["state"] for t in got["trials"]].count("failed") == 0, got


@pytest.mark.slow
def test_a_sigkilled_run_is_named_once_by_the_next_run_in_its_folder(tmp_path):
    """SIGKILL (what the kernel's OOM killer sends) leaves no result.json: the next run in that folder says so in
    one line and continues; the run after that, whose predecessor ended with a record, says nothing of it."""
    run_dir = tmp_path / "run"
    data = [f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "trainer.epochs=3", "checkpoint.latest_every_steps=1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tcgexp.train", *data, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=job_env(),
    )
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "latest" / "state.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its first latest/"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "result.json").exists()
    after = tcgexp_train(f"resume={run_dir}", "trainer.max_steps=0", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert after.returncode == 0, after.stderr[-3000:]
    said = [line for line in (after.stdout + after.stderr).splitlines() if "ended without a record" in line]
    assert len(said) == 1 and f"pid {proc.pid}" in said[0] and "killed" in said[0], said
    last = tcgexp_train(f"resume={run_dir}", "trainer.epochs=4", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert last.returncode == 0 and "ended without a record" not in last.stdout + last.stderr, last.stderr[-2000:]


def test_a_refused_or_failed_run_is_never_taken_for_killed(tmp_path, capsys):
    """A run refused in a folder that stays (a user's empty folder) leaves no claim that looks killed."""
    kept = tmp_path / "kept"
    kept.mkdir()
    data = [f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "trainer.epochs=1"]
    with pytest.raises(Exception, match="2020-01-01"):
        train(compose_config(*data, "dataset.dates=[2020-01-01]"), run_dir=kept)
    assert kept.is_dir()
    with pytest.raises(ConfigError):
        train(compose_config(*data, "tbptt.accum_steps=0"), run_dir=kept)
    capsys.readouterr()
    result = train(compose_config(*data), run_dir=kept)
    assert result["status"] == "completed"
    assert "ended without a record" not in capsys.readouterr().out


def test_a_run_that_leaves_at_once_records_how_it_ended(tmp_path):
    """A second stopping signal (the handler raises ForcedStop wherever the main thread is: here inside a cache
    lookup of the loop) ends the run before a step finishes, where the trainer writes no result: result.json
    says it was interrupted, by which signal, with the line the run said (it left none before)."""
    from tcgexp.lifecycle.signals import ForcedStop, RunInterrupted

    calls = 0

    def probe() -> float:  # the caches' memory probe, called on the main thread with loader.workers=0
        nonlocal calls
        calls += 1
        if calls == 5:
            raise ForcedStop("SIGTERM")
        return 0.0

    run_dir = tmp_path / "run"
    cfg = compose_config(f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "loader.workers=0")
    with pytest.raises(RunInterrupted) as stopped:
        train(cfg, run_dir=run_dir, memory_probe=probe)
    assert stopped.value.code == 143
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "interrupted" and record["signal"] == "SIGTERM", record
    assert record["error"] in stopped.value.message and f"resume={run_dir}" in record["error"], record
