"""``tcgexp-report`` reads every job as it is, on real sweeps whose folders were then damaged.

It used to name a best trial whose folder was deleted, or whose result.json was truncated, without a word;
to report a plain sweep with a job folder deleted as "1 jobs: 1 completed"; to show a NaN loss as a COMPLETED
``nan``; and to die with a raw OSError traceback on a read-only sweep folder. Now a missing folder, an
unreadable result.json and a completed run without a finite value are named as such, one line each (in summary.md
and on the console, the best trial first), never counted completed; a read-only sweep folder gets the report on the
console and one line saying why its files were not written.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sweep.conftest import ROOT, halving, job_env, trials

pytestmark = pytest.mark.slow  # real sweeps in processes of their own


def report(sweep: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.report.report", str(sweep)],
        cwd=ROOT,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def grid(tmp_path: Path) -> Path:
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "--multirun",
            "+experiment=smoke",
            "tracking=off",
            f"dataset.root={tmp_path / 'data'}",
            f"hydra.sweep.dir={sweep}",
            "cache=off,plan,lru",
        ],
        cwd=tmp_path,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return sweep


def test_a_grid_sweeps_missing_truncated_and_nan_jobs_are_named_never_completed(tmp_path):
    sweep = grid(tmp_path)
    shutil.rmtree(sweep / "2")  # the last job's folder: nothing after it to show a gap
    result = sweep / "1" / "result.json"
    result.write_text(result.read_text()[:100])  # truncated
    record = json.loads((sweep / "0" / "result.json").read_text())
    record["final"]["loss"] = math.nan
    (sweep / "0" / "result.json").write_text(json.dumps(record))  # Python's json writes NaN
    done = report(sweep)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    md = (sweep / "summary.md").read_text()
    assert "3 jobs: 0 completed, 0 failed, 1 missing, 1 damaged, 1 nan." in md, md
    rows = {r.split("|")[1].strip(): r for r in md.splitlines() if r.startswith("| ") and r[2].isdigit()}
    assert "| MISSING |" in rows["2"] and "| DAMAGED |" in rows["1"] and "| NAN |" in rows["0"], rows
    said = [ln for ln in done.stderr.splitlines() if "cannot be read as it ended" in ln]  # one line each
    assert len(said) == 3, said
    assert any("job 2 cannot be read as it ended (missing): its folder" in ln for ln in said), said
    assert any("job 1 cannot be read as it ended (damaged)" in ln for ln in said), said
    assert any("job 0 cannot be read as it ended (nan): result.json's final val/loss is nan" in ln for ln in said)
    assert all("left out: the findings are based on the other 0 job(s)" in ln for ln in said), said
    assert "findings: none: no job completed (3 ended without a result" in done.stderr, done.stderr[-3000:]


@pytest.fixture
def read_only(tmp_path):
    """Bind-mount a folder read-only on itself (as root, chmod would be ignored)."""
    mounted = []

    def make(folder: Path) -> Path:
        if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode != 0:
            pytest.skip("cannot bind-mount here")
        mounted.append(folder)
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_read_only_sweep_folder_gets_its_report_on_the_console_and_one_line(tmp_path, read_only):
    sweep = grid(tmp_path)
    before = {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()}
    read_only(sweep)
    done = report(sweep)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.startswith(f"# Sweep {sweep}") and "## Findings" in done.stdout, done.stdout[-3000:]
    said = [ln for ln in done.stderr.splitlines() if "were not written" in ln]
    assert len(said) == 1 and "Read-only file system" in said[0], done.stderr[-3000:]
    assert "[sweep] findings" in done.stderr and "rebuild this report any time" in done.stderr
    assert {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()} == before


def test_a_halving_sweeps_best_trial_without_its_folder_or_with_a_truncated_result_is_named(tmp_path):
    args = [
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=1",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler=grid",
        "tracking=off",
        "optimizer.lr=choice(0.001,0.003,0.01)",
    ]
    done = halving(tmp_path, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep = tmp_path / "sweep"
    got = trials(sweep)
    best, other = got["best"], next(t["number"] for t in got["trials"] if t["number"] != got["best"])
    shutil.rmtree(sweep / str(best))
    result = sweep / str(other) / "result.json"
    result.write_text(result.read_text()[:50])
    done = report(sweep)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = [ln for ln in done.stderr.splitlines() if "cannot be read as it ended" in ln]  # one line each
    assert len(said) == 2 and f"the best, trial {best} cannot be read as it ended (missing)" in said[0], said
    assert f"trial {other} cannot be read as it ended (damaged)" in said[1] and "result.json cannot be read" in said[1]
    assert all("is the study's record" in ln for ln in said), said
    md = (sweep / "summary.md").read_text()
    assert "1 complete, 0 pruned" in md and "1 missing, 1 damaged" in md, md
