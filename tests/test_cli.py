"""The entry points as a user runs them: real processes, real Hydra."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from tcgexp.app import compose
from tcgexp.config import build
from tests.conftest import assert_continued

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, cwd=ROOT, **kw):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=300, **kw)


def test_data_entry_builds_then_validates(tmp_path):
    args = ("tcgexp.data", f"dataset.root={tmp_path}", "dataset.rows_per_day=400")
    first = run(*args)
    assert first.returncode == 0, first.stderr
    assert "[data] 2026-07-27: built" in first.stdout
    second = run(*args)
    assert second.returncode == 0 and "[data] 2026-07-27: validated" in second.stdout
    assert not list(tmp_path.glob("*.log")) and not (tmp_path / ".hydra").exists()


def test_train_entry_trains_and_leaves_its_outputs(tmp_path):
    run_dir = tmp_path / "run"
    res = run(
        "tcgexp.train",
        f"dataset.root={tmp_path / 'data'}",
        "dataset.rows_per_day=600",
        "dataset.row_group_rows=128",
        "tbptt.batch_size=64",
        "tbptt.chunk=8",
        "model.hidden=16",
        "trainer.epochs=1",
        "tracking=off",
        f"hydra.run.dir={run_dir}",
    )
    assert res.returncode == 0, res.stderr
    assert "[cache-train] hits=" in res.stdout and "[cache-val] hits=" in res.stdout
    assert (run_dir / ".hydra" / "config.yaml").exists()
    log = (run_dir / "train.log").read_text()  # Hydra's job log holds what the run printed, printed once
    assert "[train] val loss" in log and "[cache-train] hits=" in log
    assert res.stdout.count("[train] val loss") == 1
    result = json.loads((run_dir / "result.json").read_text())
    assert result["planned"] == {**result["planned"], "microbatches": result["processed"]["microbatches"]}
    for name in ("best", "latest", "epoch_0001"):
        assert (run_dir / "checkpoints" / name / "model.safetensors").exists(), name
    assert not list(run_dir.rglob("*.npz")), "no spill outlives the run"


def test_errors_reach_the_user_as_one_line(tmp_path):
    run("tcgexp.data", f"dataset.root={tmp_path}", "dataset.rows_per_day=300")
    manifest = tmp_path / "bc_data" / "2026-07-27.manifest.json"
    manifest.write_text("{broken")
    res = run("tcgexp.data", f"dataset.root={tmp_path}", "dataset.rows_per_day=300")
    assert res.returncode != 0
    assert res.stderr.strip().splitlines()[-1].startswith(f"error: {manifest}")
    bad = run("tcgexp.data", "dataset.rows_per_dya=3")
    assert bad.returncode != 0 and "rows_per_dya" in bad.stderr


def test_sigkilled_build_resumes_to_identical_content(tmp_path):
    """A real build process killed with SIGKILL mid-day resumes, redoing only unfinished shards."""
    args = (
        "tcgexp.data",
        f"dataset.root={tmp_path / 'a'}",
        "dataset.rows_per_day=20000",
        "dataset.episodes_per_shard=2",
        "dataset.workers=1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    work = tmp_path / "a" / "bc_data" / ".build" / "2026-07-27"
    deadline = time.monotonic() + 120
    while len(list(work.glob("*.done"))) < 5:
        assert proc.poll() is None, "the build finished before it could be killed; make it bigger"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = {p.name: p.stat().st_mtime_ns for p in work.glob("*.done")}
    assert not (tmp_path / "a" / "bc_data" / "2026-07-27.manifest.json").exists()
    corpus = build(compose(*args[1:]).dataset)
    assert corpus.build() == {"2026-07-27": "built"}
    redone = corpus.encoded["2026-07-27"]
    assert not {int(n[6:11]) for n in done} & set(redone), "finished shards were not redone"
    fresh = build(compose(f"dataset.root={tmp_path / 'b'}", *args[2:]).dataset)
    fresh.build()
    assert pq.read_table(fresh.files[0]).equals(pq.read_table(corpus.files[0]))


@pytest.mark.slow
def test_5d_corpus_builds_with_full_verification(tmp_path):
    res = run("tcgexp.data", "dataset=5d", f"dataset.root={tmp_path}", "dataset.verify=full")
    assert res.returncode == 0, res.stderr
    again = run("tcgexp.data", "dataset=5d", f"dataset.root={tmp_path}", "dataset.verify=full")
    assert again.returncode == 0 and again.stdout.count("validated") == 5
    for m in sorted((tmp_path / "bc_data").glob("*.manifest.json")):
        manifest = json.loads(m.read_text())
        assert 30000 <= manifest["rows"] < 30400 and len(manifest["row_groups"]) >= 7


def test_multirun_sweeps_with_the_basic_launcher(tmp_path):
    sweep = tmp_path / "sweep"
    res = run(
        "tcgexp.train",
        "--multirun",
        f"dataset.root={tmp_path / 'data'}",
        "dataset.rows_per_day=500",
        "dataset.row_group_rows=128",
        "tbptt.batch_size=64",
        "tbptt.chunk=8",
        "trainer.epochs=1",
        "tracking=off",
        "model.hidden=8,16",
        f"hydra.sweep.dir={sweep}",
    )
    assert res.returncode == 0, res.stderr
    results = [json.loads((sweep / str(i) / "result.json").read_text()) for i in range(2)]
    assert [r["processed"]["optimizer_steps"] > 0 for r in results] == [True, True]
    assert (sweep / "multirun.yaml").exists()


def test_resume_alone_continues_and_refuses_what_would_change_the_result(tmp_path):
    """`resume=<run dir>` needs nothing else: the checkpoint's overrides are the base."""
    tiny = [
        f"dataset.root={tmp_path / 'data'}",
        "dataset.rows_per_day=600",
        "dataset.row_group_rows=128",
        "tbptt.batch_size=64",
        "tbptt.chunk=8",
        "model.hidden=16",
        "trainer.epochs=2",
        "tracking=off",
        "cache=lru",
    ]
    whole = run("tcgexp.train", *tiny, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr
    first = run("tcgexp.train", *tiny, "trainer.max_steps=4", f"hydra.run.dir={tmp_path / 'first'}")
    assert first.returncode == 0, first.stderr
    assert json.loads((tmp_path / "first" / "result.json").read_text())["status"] == "stopped"

    refused = run(
        "tcgexp.train",
        f"resume={tmp_path / 'first'}",
        "model.hidden=32",
        "trainer.max_steps=0",
        f"hydra.run.dir={tmp_path / 'x'}",
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].startswith("error: resume=") and "model.hidden=32" in refused.stderr
    schedule = run(
        "tcgexp.train",
        f"resume={tmp_path / 'first'}",
        "scheduler=constant",
        "trainer.max_steps=0",
        f"hydra.run.dir={tmp_path / 'y'}",
    )
    assert schedule.returncode != 0 and "scheduler.reset=true" in schedule.stderr

    # cache and loader may change (they never change what is computed); nothing else is passed
    rest = run(
        "tcgexp.train",
        f"resume={tmp_path / 'first'}",
        "trainer.max_steps=0",
        "cache=plan",
        "loader.workers=0",
        f"hydra.run.dir={tmp_path / 'rest'}",
    )
    assert rest.returncode == 0, rest.stderr
    done = json.loads((tmp_path / "rest" / "result.json").read_text())
    ran = OmegaConf.load(tmp_path / "rest" / ".hydra" / "config.yaml")
    assert ran.model.hidden == 16 and ran.tbptt.chunk == 8 and ran.cache.policy._target_.endswith("PlanPolicy")
    want = json.loads((tmp_path / "whole" / "result.json").read_text())
    assert (
        done["status"] == "completed" and done["processed"]["optimizer_steps"] == want["processed"]["optimizer_steps"]
    )
    assert_continued(done, 4)  # trainer.max_steps=4 stopped the first
    assert done["final"]["loss"] == want["final"]["loss"], "the resumed run ends where the whole run ends"
