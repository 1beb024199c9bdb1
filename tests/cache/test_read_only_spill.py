"""A spill whose disk turns read-only mid-run (issue 48): the cause is said once, in the run's [cache] line naming the
folder and what to change (it was said three times: a warning, a log line, that line), and the clean-up of the
run's two spill dirs says at most one line (it said four: each cache's, then the spill root's pass, per folder)."""

from __future__ import annotations

import subprocess
import warnings

from tcgexp.lifecycle.rundir import mark
from tcgexp.train import train
from tests.conftest import compose_config
from tests.reliability.test_disk import tmpfs  # noqa: F401 - the fixture
from tests.train.conftest import TINY_TRAIN


def run_turning_read_only(tmp_path, tmpfs, capsys):  # noqa: F811
    run_dir = tmp_path / "run"
    mark(run_dir)
    spill = tmpfs(run_dir / ".cache_spill", "50m")
    state = {"calls": 0, "ro": False}

    def probe() -> float:  # the caches' memory probe: the disk turns read-only once the spill dirs are made
        state["calls"] += 1
        if state["calls"] >= 3 and not state["ro"]:  # EBUSY while a file is open for writing: next call
            state["ro"] = subprocess.run(["mount", "-o", "remount,ro", str(spill)], capture_output=True).returncode == 0
        return 0.0

    cfg = compose_config(
        f"dataset.root={tmp_path / 'data'}",
        *TINY_TRAIN,
        "trainer.epochs=1",
        "cache=hot60",
        "cache.capacity=1",
        "cache.policy.hot_fraction=0.0",
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = train(cfg, run_dir=run_dir, memory_probe=probe)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(spill)], capture_output=True)
    assert state["ro"], "the spill's disk was never made read-only"
    out = capsys.readouterr()
    # what a user's console shows: the printed lines, and each warning as its one line (console.one_line_warning)
    return result, (out.out + out.err).splitlines() + [str(w.message) for w in caught], caught


def test_a_read_only_spill_says_its_cause_once_naming_the_folder_and_the_fix(tmp_path, tmpfs, capsys):  # noqa: F811
    result, said, _ = run_turning_read_only(tmp_path, tmpfs, capsys)
    assert result["cache"]["train"]["spill_disabled"] == 1
    cause = [ln for ln in said if "read-only" in ln.lower() and "could not remove" not in ln]
    assert len(cause) == 1, cause
    assert str(tmp_path / "run" / ".cache_spill" / "train") in cause[0] and "cache.spill=false" in cause[0], cause
    assert not [ln for ln in said if "Errno" in ln and "could not remove" not in ln], said  # in words, not errno's


def test_a_read_only_spill_says_what_it_left_in_one_line_from_the_cache(tmp_path, tmpfs, capsys):  # noqa: F811
    _, _, caught = run_turning_read_only(tmp_path, tmpfs, capsys)
    ours = [str(w.message) for w in caught if "tcgexp/cache/" in w.filename and "could not remove" in str(w.message)]
    assert len(ours) == 1, ours  # both caches' dirs: one line for their folder
    assert str(tmp_path / "run" / ".cache_spill") in ours[0] and "read-only" in ours[0], ours


def test_a_read_only_spill_says_at_most_one_removal_line_in_all(tmp_path, tmpfs, capsys):  # noqa: F811
    _, said, _ = run_turning_read_only(tmp_path, tmpfs, capsys)
    removal = [ln for ln in said if "could not remove" in ln or "remove it by hand" in ln]
    assert len(removal) <= 1, removal
