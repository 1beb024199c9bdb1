"""A really full disk (a small tmpfs this test mounts): spilling stops, training goes on; checkpoints fail loudly;
the spill leaves the checkpoints their room, and gives its own back when the disk fills anyway."""

from __future__ import annotations

import json
import os
import subprocess
import warnings

import pytest

from tcgexp.lifecycle.checkpoint import CheckpointWriteError
from tcgexp.lifecycle.rundir import mark
from tcgexp.ownership import tree_bytes
from tcgexp.train import train
from tests.conftest import compose_config
from tests.train.conftest import TINY_TRAIN


@pytest.fixture
def tmpfs():
    mounted = []

    def mount(path, size: str):
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()})")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_full_disk_stops_spilling_and_training_goes_on(tmp_path, tmpfs):
    run_dir = tmp_path / "run"
    mark(run_dir)  # a run dir of ours, its spill root on a small filesystem of its own
    tmpfs(run_dir / ".cache_spill", "600k")  # room for about one spilled row group
    overrides = [
        f"dataset.root={tmp_path / 'data'}",
        *TINY_TRAIN,
        "cache=hot60",
        "cache.capacity=2",
        "cache.policy.hot_fraction=0.0",
        "cache.spill_budget_bytes=1000000000",
    ]
    calm = train(compose_config(*overrides, "cache.spill=false"), run_dir=tmp_path / "nospill")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(compose_config(*overrides), run_dir=run_dir)
    c = result["cache"]["train"]
    assert c["spill_disabled"] == 1 and c["evictions"] > 0
    assert any("disabled" in str(w.message) for w in caught)
    assert result["processed"]["optimizer_steps"] == calm["processed"]["optimizer_steps"]
    assert not [p for p in (run_dir / ".cache_spill").rglob("*") if p.is_file() and p.suffix in (".npz", ".tmp")]


def test_full_disk_makes_checkpoints_fail_loudly_never_half_written(tmp_path, tmpfs):
    run_dir = tmp_path / "run"
    mark(run_dir)  # a run dir of ours, its checkpoints on a small filesystem of its own
    ckpt = tmpfs(run_dir / "checkpoints", "40k")  # smaller than one checkpoint
    with pytest.raises(CheckpointWriteError) as err:
        train(compose_config(f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "model.hidden=32"), run_dir=run_dir)
    assert str(ckpt / "latest") in str(err.value) and "free disk space" in str(err.value)
    assert not (ckpt / "latest").exists(), "no latest/ at all rather than a broken one"
    assert not list(ckpt.iterdir()), "and no partial temporary directory either"
    record = json.loads((run_dir / "result.json").read_text())  # the run ended on an error: it says so on disk
    assert record["status"] == "failed" and "free disk space" in record["error"], record
    assert record["processed"]["optimizer_steps"] > 0 and record["history"] == []


SMALL_DISK = [
    *TINY_TRAIN,
    "cache=hot60",
    "cache.capacity=2",
    "cache.policy.hot_fraction=0.0",
    "cache.spill_budget_bytes=1000000000",  # the budget allows far more than the disk holds
]


@pytest.mark.slow
def test_the_spill_leaves_the_next_checkpoint_its_room_on_a_small_disk(tmp_path, tmpfs):
    """Run dir, spill and checkpoints on one small disk (1 MB: the spill alone would take all of it): the spill
    keeps room for the next save free (it used to fill the disk, turn itself off after a write error, and the next
    checkpoint failed with 'free disk space and resume' while its own files held the space)."""
    run_dir = tmpfs(tmp_path / "disk", "1000k") / "run"
    mark(run_dir)
    result = train(compose_config(f"dataset.root={tmp_path / 'data'}", *SMALL_DISK), run_dir=run_dir)
    assert result["status"] == "completed"
    c = result["cache"]["train"]
    assert c["ssd_spills"] > 0 and c["spill_disabled"] == 0, c  # it spilled, and never met a full disk
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best", "epoch_0001", "epoch_0002", "latest"]


@pytest.mark.slow
def test_a_disk_that_fills_anyway_costs_the_spill_before_a_checkpoint(tmp_path, tmpfs, capsys):
    """Another writer fills the disk while the run's spill holds files: the next checkpoint fails for space, the
    spill gives its files back (and stops), and the checkpoint is written again; the run finishes, the other
    writer's file untouched."""
    disk = tmpfs(tmp_path / "disk", "1500k")
    run_dir = disk / "run"
    mark(run_dir)
    filler = disk / "someone else's file"

    def probe() -> float:  # called at every cache lookup: once the spill holds enough, the disk fills
        if not filler.exists() and tree_bytes(run_dir / ".cache_spill") > 450_000:
            st = os.statvfs(disk)
            filler.write_bytes(b"x" * max(0, st.f_bavail * st.f_frsize - 16_384))
        return 0.0

    cfg = compose_config(f"dataset.root={tmp_path / 'data'}", *SMALL_DISK, "loader.workers=0")
    result = train(cfg, run_dir=run_dir, memory_probe=probe)
    assert filler.exists(), "the spill never held enough to test this"
    assert result["status"] == "completed"
    said = [ln for ln in capsys.readouterr().out.splitlines() if "the disk filled while a checkpoint" in ln]
    # Checkpoints are written beside training: the next one met the full disk (the spill gave its files back and
    # stopped, said once), or the spill's own reserve made its room first (nothing to say). Never a failed run.
    disabled = result["cache"]["train"]["spill_disabled"]
    assert (disabled, len(said)) in ((1, 1), (0, 0)), (disabled, said)
    assert not said or "gave back" in said[0], said
    assert (run_dir / "checkpoints" / "latest" / "checksums.json").is_file()
    assert filler.stat().st_size > 0  # the other writer's file untouched


@pytest.mark.parametrize("room", [True, False], ids=["room-made", "no-room"])
def test_a_checkpoint_that_met_a_full_disk_is_written_again_once_room_is_made(tmp_path, tmpfs, room):
    """The writer's thread: a write MLX could not finish (the disk full) is written again once `make_room` freed
    space, and whole; where nothing was freed the error is raised at the next check, naming the checkpoint."""
    import mlx.core as mx
    import mlx.optimizers as optim

    from tcgexp.learn.model import RecurrentPolicy
    from tcgexp.train.outputs import Checkpointer

    disk = tmpfs(tmp_path / "disk", "600k")
    model = RecurrentPolicy(feature_dim=16, action_dim=8, hidden=64, memory=True)
    mx.eval(model.parameters())
    checkpoints = Checkpointer(every_epochs=1, latest_every_steps=0, folder=disk / "checkpoints")
    filler = disk / "filler"
    st = os.statvfs(disk)
    filler.write_bytes(b"x" * (st.f_bavail * st.f_frsize - 4096))
    calls = []

    def make_room(exc):
        calls.append(str(exc))
        if room:
            filler.unlink()
        return room

    checkpoints.write(["latest"], model=model, optimizer=optim.AdamW(1e-3), lanes={}, state={}, make_room=make_room)
    if room:
        checkpoints.drain()
        assert (disk / "checkpoints" / "latest" / "model.safetensors").stat().st_size > 10_000
    else:
        with pytest.raises(CheckpointWriteError, match="checkpoints/latest failed"):
            checkpoints.drain()
        assert not (disk / "checkpoints" / "latest").exists()
    assert len(calls) == 1 and "free disk space" in calls[0]
