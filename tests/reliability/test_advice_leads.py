"""Advice that leads somewhere: each refusal's own advice, followed to the letter, fixes what it refused."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tcgexp.data import DataError
from tcgexp.train import train
from tests.conftest import TINY, compose_config, make_corpus
from tests.reliability.test_disk import tmpfs  # noqa: F401 - the fixture
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def test_a_catalog_row_pointing_at_a_missing_file_is_fixed_by_the_data_command_it_advises(tmp_path):
    """The row was left out and the data command only said "validated": the same refusal again, for ever."""
    root = tmp_path / "data"
    days = [o for o in TINY_TRAIN if o.startswith("dataset.")] + ["dataset.days=2"]
    make_corpus(root, *days, build_now=True)
    with sqlite3.connect(root / "catalog.sqlite") as con:
        con.execute("UPDATE datasets SET path = 'bc_data/moved.parquet' WHERE date = '2026-07-28'")
    selection = [*days, "dataset.dates=[2026-07-28]"]
    with pytest.raises(DataError) as err:
        train(
            compose_config(f"dataset.root={root}", *TINY_TRAIN, *selection, "trainer.epochs=1"),
            run_dir=tmp_path / "run",
        )
    assert "python -m tcgexp.data" in str(err.value) and "same dataset settings and selection" in str(err.value)
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.data", f"dataset.root={root}", *TINY, *selection],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 0 and "points at bc_data/2026-07-28.parquet" in res.stderr + res.stdout, res.stderr
    result = train(
        compose_config(f"dataset.root={root}", *TINY_TRAIN, *selection, "trainer.epochs=1"), run_dir=tmp_path / "run"
    )
    assert result["status"] == "completed"


def data_command(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.data", f"dataset.root={root}", *TINY, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.slow
def test_a_day_whose_parquet_is_gone_is_built_again_by_the_command_both_advise(tmp_path):
    """A day's Parquet deleted, its manifest and replay ZIP kept: training advised the data command, which then
    said "delete the manifest to rebuild". Now the data command builds it again from its ZIP (the same bytes its
    manifest records), and a refusal where nothing can be built says the same command, or what is gone too."""
    import json

    root = tmp_path / "data"
    days = [o for o in TINY_TRAIN if o.startswith("dataset.")] + ["dataset.days=2"]
    make_corpus(root, *days, build_now=True)
    day = root / "bc_data" / "2026-07-28.parquet"
    recorded = json.loads(day.with_name("2026-07-28.manifest.json").read_text())["sha256"]
    day.unlink()
    selection = [*days, "dataset.dates=[2026-07-28]"]
    cfg = compose_config(f"dataset.root={root}", *TINY_TRAIN, *selection, "trainer.epochs=1")
    with pytest.raises(DataError) as err:
        train(cfg, run_dir=tmp_path / "run")
    assert "python -m tcgexp.data" in str(err.value), err.value
    done = data_command(root, *selection)
    assert done.returncode == 0 and "2026-07-28: rebuilt" in done.stdout + done.stderr, done.stderr[-3000:]
    from tcgexp.data.manifest import file_sha256

    assert file_sha256(day) == recorded  # the day it was, byte for byte
    assert train(cfg, run_dir=tmp_path / "run")["status"] == "completed"
    # nothing to build it from: one line naming what is gone, and what brings the day back
    day.unlink()
    zips = sorted(root.rglob("2026-07-28*.zip"))
    assert zips, "no replay ZIP found for the day"
    for z in zips:
        z.unlink()
    done = data_command(root, *selection)
    assert done.returncode != 0
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert "its day file is missing" in line and "replay ZIP" in line and "is gone too" in line, line


@pytest.mark.slow
def test_a_spill_disk_turned_read_only_mid_run_is_named_read_only(tmp_path, tmpfs, capsys):  # noqa: F811
    """A file system remounted read-only under the spill (ext4's errors=remount-ro) was summed up as "disk full?"."""
    from tcgexp.lifecycle.rundir import mark

    run_dir = tmp_path / "run"
    mark(run_dir)
    spill = tmpfs(run_dir / ".cache_spill", "50m")
    calls = []

    def probe() -> float:  # the caches' memory probe: the fault comes after the spill dirs are made
        calls.append(1)
        if len(calls) == 3:
            subprocess.run(["mount", "-o", "remount,ro", str(spill)], check=True)
        return 0.0

    try:
        result = train(
            compose_config(
                f"dataset.root={tmp_path / 'data'}",
                *TINY_TRAIN,
                "trainer.epochs=1",
                "cache=hot60",
                "cache.capacity=1",
                "cache.policy.hot_fraction=0.0",
            ),
            run_dir=run_dir,
            memory_probe=probe,
        )
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(spill)])
    assert result["cache"]["train"]["spill_disabled"] == 1
    out = capsys.readouterr()
    [line] = [x for x in (out.out + out.err).splitlines() if "spilling to" in x and "cache-train" in x]
    assert "read-only" in line and "disk full" not in line and "cache.spill=false" in line, line
