"""Storage that turns read-only or is shared: spill goes, training stays; a finished read-only corpus trains;
one run per run folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from tcgexp.errors import ConfigError
from tcgexp.train import train
from tests.conftest import compose_config
from tests.reliability.test_disk import tmpfs  # noqa: F401  (the fixture: mounts, skips where not allowed)
from tests.reliability.test_kill import ROOT
from tests.train.conftest import TINY_TRAIN

SPILLING = [
    *TINY_TRAIN,
    "cache=hot60",
    "cache.capacity=2",
    "cache.policy.hot_fraction=0.0",
    "cache.spill_budget_bytes=1000000000",
]


def remount_ro(path) -> bool:
    return subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True).returncode == 0


def test_spill_storage_turning_read_only_mid_run_costs_spill_not_training(tmp_path, tmpfs):  # noqa: F811
    from tcgexp.lifecycle.rundir import mark

    run_dir = tmp_path / "run"
    mark(run_dir)  # a run dir of ours, with its spill root on a filesystem of its own
    spill = tmpfs(run_dir / ".cache_spill", "50m")
    overrides = [f"dataset.root={tmp_path / 'data'}", *SPILLING]
    calm = train(compose_config(*overrides, "cache.spill=false"), run_dir=tmp_path / "nospill")
    state = {"calls": 0, "ro": False}

    def probe() -> float:  # the cache asks this on every access: the moment the disk turns read-only
        state["calls"] += 1
        if state["calls"] >= 30 and not state["ro"]:
            state["ro"] = remount_ro(spill)  # EBUSY while a file is open for writing: try again next call
        return 0.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(compose_config(*overrides), run_dir=run_dir, memory_probe=probe)
    assert state["ro"], "the spill filesystem was made read-only during the run"
    c = result["cache"]["train"]
    assert c["spill_disabled"] == 1 and c["ssd_spills"] > 0
    assert sum("disabled" in str(w.message) for w in caught) == 1
    assert result["processed"]["optimizer_steps"] == calm["processed"]["optimizer_steps"]


def test_a_finished_corpus_on_read_only_storage_trains(tmp_path, tmpfs):  # noqa: F811
    data = tmpfs(tmp_path / "data", "50m")
    overrides = [f"dataset.root={data}", *TINY_TRAIN]
    first = train(compose_config(*overrides), run_dir=tmp_path / "a")
    assert remount_ro(data)
    again = train(compose_config(*overrides), run_dir=tmp_path / "b")
    assert again["processed"] == first["processed"] and again["final"] == first["final"]


def test_an_unfinished_corpus_on_read_only_storage_is_one_clear_error(tmp_path, tmpfs):  # noqa: F811
    from tcgexp.data.errors import DataError

    data = tmpfs(tmp_path / "data", "1m")
    assert remount_ro(data)
    with pytest.raises(DataError, match="cannot be written.*not yet built"):
        train(compose_config(f"dataset.root={data}", *TINY_TRAIN), run_dir=tmp_path / "a")


def test_a_day_whose_parquet_is_gone_on_read_only_storage_is_one_clear_error(tmp_path, tmpfs):  # noqa: F811
    """Where the day cannot be built again (a raw OSError traceback from the rebuild's work dir before): one line
    naming the file, that the storage is read-only, and where building it again works."""
    from tcgexp.data.errors import DataError

    data = tmpfs(tmp_path / "data", "50m")
    overrides = [f"dataset.root={data}", *TINY_TRAIN]
    train(compose_config(*overrides), run_dir=tmp_path / "a")
    gone = min((data / "bc_data").glob("*.parquet"))
    gone.unlink()
    assert remount_ro(data)
    with pytest.raises(DataError, match="its day file is missing -- the corpus is on read-only storage") as err:
        train(compose_config(*overrides), run_dir=tmp_path / "b")
    assert str(gone) in str(err.value)


def test_clean_on_a_read_only_corpus_is_one_line_and_deletes_nothing(tmp_path, tmpfs):  # noqa: F811
    from tests.conftest import TINY, make_corpus

    data = tmpfs(tmp_path / "data", "20m")
    make_corpus(data, build_now=True)
    before = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
    assert remount_ro(data)
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.data", f"dataset.root={data}", *TINY, "action=clean"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "read-only" in lines[0] and str(data) in lines[0], (
        res.stderr[-2000:]
    )
    assert sorted(str(p.relative_to(data)) for p in data.rglob("*")) == before


# The child trains into a run dir and, after its third optimizer step, says so and waits for "go".
CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from tcgexp.api import setup; setup()  # MKL before mlx.core (imported below), as every entry point does
    from tcgexp.train import train
    from tcgexp.app import compose
    import tcgexp.train.trainer as trainer
    run_dir, flags, *overrides = sys.argv[1:]
    real = trainer.Trainer.on_step
    def on_step(self, m):
        real(self, m)
        if self.learner.progress.opt_steps == 3:
            (Path(flags) / "ready").write_text(str(os.getpid()))
            deadline = time.monotonic() + 120
            while not (Path(flags) / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
    trainer.Trainer.on_step = on_step
    train(compose(*overrides), run_dir=run_dir)
""")


def test_a_second_run_into_a_busy_run_folder_is_refused_naming_the_holder(tmp_path):
    run_dir, flags = tmp_path / "run", tmp_path / "flags"
    flags.mkdir()
    overrides = [f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(run_dir), str(flags), *overrides],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (flags / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the first run never got going"
            time.sleep(0.01)
        with pytest.raises(ConfigError, match=f"in use by another run \\(pid {proc.pid} on "):
            train(compose_config(*overrides), run_dir=run_dir)
    finally:
        (flags / "go").write_text("")
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert (run_dir / "result.json").exists() and (run_dir / "checkpoints" / "latest").is_dir()
