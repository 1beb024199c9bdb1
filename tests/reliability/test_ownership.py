"""Spill has an owner: a SIGKILLed run's spill is reclaimed by the next run anywhere; nothing tcgexp did not
create is ever deleted."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest
from rich.console import Console

from tcgexp.train import train
from tests.conftest import compose_config
from tests.reliability.test_kill import ROOT
from tests.train.conftest import TINY_TRAIN

SPILLING = [
    *TINY_TRAIN,
    "cache=hot60",
    "cache.capacity=2",
    "cache.policy.hot_fraction=0.0",
    "cache.spill_budget_bytes=1000000000",
]

# The child SIGKILLs itself right after its third spill file is in place: a run that never cleans up.
CHILD = textwrap.dedent("""
    import os, signal, sys
    from tcgexp.train import train
    from tcgexp.app import compose
    import tcgexp.cache.spill as spill
    run_dir, *overrides = sys.argv[1:]
    real = spill.SpillStore.put
    calls = {"n": 0}
    def put(self, *a, **k):
        ok = real(self, *a, **k)
        calls["n"] += ok
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return ok
    spill.SpillStore.put = put
    train(compose(*overrides), run_dir=run_dir)
""")


def test_spill_of_a_sigkilled_run_is_reclaimed_by_a_run_in_another_folder(tmp_path, private_state_dir):
    data = f"dataset.root={tmp_path / 'data'}"
    killed = tmp_path / "first"
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(killed), data, *SPILLING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    left = killed / ".cache_spill" / "train"
    assert len(list(left.glob("*.npz"))) == 3, "the killed run left its spill behind"
    out = io.StringIO()
    train(
        compose_config(data, *TINY_TRAIN),
        run_dir=tmp_path / "elsewhere" / "second",
        console=Console(file=out, width=300),
    )
    assert not left.exists(), "no spill of the first run remains on disk"
    # (a checkpoint being written when the kill came leaves checkpoints/.latest.tmp: not spill, replaced by the next save)
    assert not [p for p in killed.rglob("*") if p.suffix in (".npz", ".tmp") and ".cache_spill" in p.parts]
    said = [ln for ln in out.getvalue().splitlines() if "reclaimed" in ln]
    assert len(said) == 1 and said[0].startswith("[cache] reclaimed") and "MiB" in said[0], out.getvalue()
    assert not list((private_state_dir / "spill").glob("*.json")), "and no registry entry points at it"


def test_a_live_runs_spill_and_a_foreign_directory_are_never_reclaimed(tmp_path, private_state_dir):
    from tcgexp.cache.registry import entry_path, reclaim
    from tcgexp.cache.spill import MARKER, SpillStore

    live = SpillStore(tmp_path / "live", 2**20)  # held by this process: alive
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    entry = entry_path(foreign)  # an entry someone pointed at a directory tcgexp did not make
    entry.write_text(json.dumps({"path": str(foreign), "pid": 999999999, "host": __import__("socket").gethostname()}))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = reclaim(MARKER)
        assert str(live.dir) not in got.dirs and (live.dir / MARKER).exists()
        assert (foreign / "notes.txt").read_text() == "mine"
        assert any("did not create" in str(w.message) for w in caught)
        assert not entry.exists(), "the entry is forgotten, the directory kept"
    finally:
        live.close()
    assert not live.dir.exists()


def test_a_run_deletes_only_the_spill_it_created(tmp_path):
    from tcgexp.lifecycle.rundir import mark

    run_dir = tmp_path / "run"
    mark(run_dir)  # a run dir of ours (an earlier run's), where something else was put into .cache_spill
    (run_dir / ".cache_spill").mkdir(parents=True)
    (run_dir / ".cache_spill" / "mine.txt").write_text("not a spill file")
    with pytest.warns(RuntimeWarning, match="did not create"):
        train(compose_config(f"dataset.root={tmp_path / 'data'}", *SPILLING), run_dir=run_dir)
    assert (run_dir / ".cache_spill" / "mine.txt").read_text() == "not a spill file"
    assert sorted(p.name for p in (run_dir / ".cache_spill").iterdir()) == ["mine.txt"], "ours went, theirs stayed"


def test_the_sweep_callback_deletes_only_marked_spill(tmp_path):
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from tcgexp.cache.spill import SpillStore
    from tcgexp.report.callbacks import SweepReport

    job = tmp_path / "0"
    spill = SpillStore(job / ".cache_spill" / "train", 2**20)
    spill._finalizer.detach()  # as if its run had died: nothing cleans up, the lock goes with it
    del spill
    (job / ".cache_spill" / "notes").mkdir()
    (job / ".cache_spill" / "notes" / "keep.txt").write_text("theirs")
    cfg = OmegaConf.create(
        {
            "hydra": {
                "runtime": {"output_dir": str(job)},
                "job": {"num": 0},
                "overrides": {"task": []},
                "mode": RunMode.RUN,
            }
        }
    )
    with pytest.warns(RuntimeWarning, match="did not create"):
        SweepReport().on_job_end(cfg, JobReturn(status=JobStatus.COMPLETED))
    assert not (job / ".cache_spill" / "train").exists()
    assert (job / ".cache_spill" / "notes" / "keep.txt").read_text() == "theirs"


@pytest.mark.slow
def test_what_a_runs_spill_root_holds_of_others_is_one_warning_line_on_the_command_line(tmp_path):
    """A finished run's .cache_spill holding a whole folder of other things (another run's files, as a run dir put
    there once left them): its resume says so in one line, no RuntimeWarning with source lines (there were 7)."""
    import subprocess
    import sys

    from tests.sweep.conftest import job_env

    run_dir = tmp_path / "run"
    data = [f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "trainer.epochs=1"]
    cmd = [sys.executable, "-m", "tcgexp.train", *data, f"hydra.run.dir={run_dir}"]
    assert subprocess.run(cmd, cwd=tmp_path, env=job_env(), capture_output=True, timeout=300).returncode == 0
    other = run_dir / ".cache_spill"
    other.mkdir()
    for name in ("a.log", "b.json", ".hidden", "checkpoints", "notes"):
        (other / name).mkdir(parents=True) if "." not in name[1:] else (other / name).write_text("theirs")
    again = subprocess.run(
        [*cmd, f"resume={run_dir}", "trainer.epochs=2", "scheduler.reset=true"],
        cwd=tmp_path,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    said = [ln for ln in again.stderr.splitlines() if "not deleting" in ln]
    assert len(said) == 1 and said[0].startswith(f"warning: not deleting what tcgexp did not create in {other} ("), said
    assert "RuntimeWarning" not in again.stderr and "warnings.warn" not in again.stderr, again.stderr[-3000:]
    assert sorted(p.name for p in other.iterdir()) == [".hidden", "a.log", "b.json", "checkpoints", "notes"]
