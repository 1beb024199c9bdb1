"""A trial stopped by a full disk is not failed for ever: the sweep stops saying so, and once space is freed the same
command continues the study, training that trial. The trial's folder is a small tmpfs this test mounts."""

from __future__ import annotations

import subprocess

import pytest

from tcgexp.lifecycle.rundir import SWEEP_MARKER, mark
from tests.reliability.test_disk import tmpfs  # noqa: F401 - the fixture
from tests.sweep.test_identity import sweep, trials

pytestmark = pytest.mark.slow


def test_a_trial_the_disk_stopped_continues_once_space_is_freed(tmp_path, tmpfs):  # noqa: F811
    folder = tmp_path / "sweep"
    mark(folder, "hydra.sweep.dir", SWEEP_MARKER, hydra_made=False)  # a sweep folder of ours, its trial 0 small
    small = tmpfs(folder / "0", "400k")  # its config and log fit; a checkpoint of model.hidden=128 does not
    args = [
        "model.hidden=128",
        "optimizer.lr=choice(0.001,0.002)",
        "hydra.sweeper.n_trials=1",
        f"hydra.sweep.dir={folder}",
    ]
    full = sweep(tmp_path, *args)
    assert full.returncode != 0 and "Traceback" not in full.stderr, full.stderr[-3000:]
    line = [x for x in full.stderr.splitlines() if x.startswith("error: ")][-1]  # the job's own error comes first
    assert "the disk is full" in line and "run the same command" in line, line
    assert [t["state"] for t in trials(folder)["trials"]] == ["running"]
    subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)  # space freed
    again = sweep(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    [t] = trials(folder)["trials"]
    assert t["state"] == "complete" and t["value"] is not None, t
