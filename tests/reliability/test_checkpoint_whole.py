"""A checkpoint is whole or refused: its seal, its optimizer state, and the folder it lives in.

The seal: a checkpoint this version wrote says so (``checkpoint_format``), so deleting its
``checksums.json`` does not turn damage into a warning. The optimizer state: keys, shapes, dtypes and
finiteness against the configured optimizer. The folder: ``latest/`` as a link, holding foreign files,
or being replaced by a live run while another process resumes from it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tcgexp.app import compose
from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.lifecycle.checkpoint import CheckpointError, CheckpointWriteError
from tcgexp.lifecycle.ckpt_files import find
from tcgexp.train import train
from tests.conftest import assert_continued
from tests.reliability.test_checkpoint_integrity import cfg, flip, fresh, stopped  # noqa: F401 (fixtures)
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def edit_state(latest: Path, edit) -> None:
    state = json.loads((latest / "state.json").read_text())
    edit(state)
    (latest / "state.json").write_text(json.dumps(state))


def resume(tmp: Path, run_dir: Path, *more: str):
    return train(cfg(tmp / "data", f"resume={tmp / 'a'}", *more), run_dir=run_dir)


# -- the seal -------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["seal-deleted", "seal-deleted-weights-flipped", "seal-and-format-deleted"])
def test_a_checkpoint_this_version_sealed_is_refused_without_its_seal(fresh, damage, tmp_path):  # noqa: F811
    """Deleting checksums.json used to demote flipped weights to a warning; the format key says the
    checkpoint was sealed, and so does what only sealing versions wrote (world) when that key is gone."""
    tmp, latest = fresh
    assert json.loads((latest / "state.json").read_text())["checkpoint_format"] == ckpt.FORMAT
    (latest / ckpt.CHECKSUMS).unlink()
    if damage == "seal-deleted-weights-flipped":
        flip(latest / "model.safetensors", at=0.6)
    if damage == "seal-and-format-deleted":
        edit_state(latest, lambda s: s.pop("checkpoint_format"))
    with pytest.raises(CheckpointError) as err:
        resume(tmp, tmp_path / "b")
    assert f"{latest / ckpt.CHECKSUMS} is missing" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "b").exists(), "refused before any step, its folder removed"


# -- the optimizer state --------------------------------------------------------------------------


def rewrite_optimizer(latest: Path, edit) -> None:
    """Change optimizer.safetensors and re-seal it: only the load-time check can notice."""
    tensors = dict(mx.load(str(latest / "optimizer.safetensors")))
    edit(tensors)
    mx.save_safetensors(str(latest / "optimizer.safetensors"), tensors)
    ckpt.seal(latest)


def first_moment(t: dict) -> str:
    return min(k for k in t if k.endswith(".m"))


def nan_in(t: dict, key: str) -> None:
    a = np.array(t[key])
    a.reshape(-1)[0] = np.nan
    t[key] = mx.array(a)


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda t: t.pop(first_moment(t)), "missing aux.bias.m"),
        (lambda t: [t.pop(k) for k in [k for k in t if k.endswith((".m", ".v"))]], "missing"),
        (lambda t: t.update({first_moment(t): mx.zeros((3, 3))}), "the configured optimizer has float32"),
        (lambda t: t.update({first_moment(t): t[first_moment(t)].astype(mx.float16)}), "float16"),
        (lambda t: nan_in(t, first_moment(t)), "holds NaN or infinity"),
        (lambda t: t.update({"momentum.extra": mx.zeros((2,))}), "unexpected momentum.extra"),
    ],
    ids=["a-moment-missing", "all-moments-missing", "wrong-shape", "wrong-dtype", "nan", "extra-key"],
)
def test_optimizer_state_is_checked_for_keys_shapes_and_finiteness(fresh, edit, says, tmp_path):  # noqa: F811
    tmp, latest = fresh
    rewrite_optimizer(latest, edit)
    with pytest.raises(CheckpointError) as err:
        resume(tmp, tmp_path / "b")
    msg = str(err.value)
    assert str(latest / "optimizer.safetensors") in msg and says in msg and "\n" not in msg, msg


def test_another_optimizer_is_refused_by_its_state(fresh, tmp_path):  # noqa: F811
    """An adamw checkpoint resumed as sgd with momentum (were the config check bypassed): the state says so."""
    from tcgexp.config import build

    tmp, latest = fresh
    c = compose("optimizer=sgd")
    model = build(cfg(tmp / "data").model)(feature_dim=_dims()[0], action_dim=_dims()[1])
    sgd = build(c.optimizer)(build(c.scheduler)(run_steps=10))
    sgd.init(model.trainable_parameters())
    with pytest.raises(CheckpointError, match="does not hold the configured optimizer's state"):
        ckpt.load(latest, model=model, optimizer=sgd)


def _dims():
    from tcgexp.games import sim

    return sim.FEATURE_DIM, sim.ACTION_DIM


# -- the folder: a link, foreign files ---------------------------------------------------------------


@pytest.fixture
def users_folder(fresh, tmp_path):  # noqa: F811
    """A user's folder holding a copy of the checkpoint and their own notes."""
    tmp, latest = fresh
    mine = tmp_path / "mine"
    shutil.copytree(latest, mine)
    (mine / "notes.txt").write_text("mine")
    return tmp, latest, mine


def folder_bytes(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_latest_that_is_a_link_is_refused_in_one_line_and_its_target_kept(users_folder, tmp_path):
    tmp, latest, mine = users_folder
    shutil.rmtree(latest)
    latest.symlink_to(mine)
    before = folder_bytes(mine)
    try:
        with pytest.raises(CheckpointError, match=r"is a link to .*mine, not a checkpoint a run wrote") as err:
            resume(tmp, tmp_path / "b")
        assert "\n" not in str(err.value)
        # a run writing into that run dir (its own resume, a requeue): refused before its first step
        with pytest.raises(CheckpointWriteError, match=r"latest is a link to .*mine.*nothing was deleted"):
            train(cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp / "a")
        assert folder_bytes(mine) == before and latest.is_symlink()
    finally:
        latest.unlink()
        shutil.copytree(tmp / "pristine", latest)


@pytest.mark.parametrize("where", ["latest", ".latest.tmp", ".latest.old", "best"])
def test_foreign_files_in_a_checkpoint_folder_are_never_deleted(fresh, where, tmp_path):  # noqa: F811
    """Resuming from a latest/ with a user's file in it reads the checkpoint; a run that would replace
    a folder holding a user's file (or find its temporary names taken) is refused at start, file kept."""
    tmp, latest = fresh
    folder = latest.parent / where
    if where != "latest":
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    try:
        if where == "latest":
            done = resume(tmp, tmp_path / "b")
            assert done["status"] == "completed"
            assert_continued(done, 3)  # the checkpoint was read: trainer.max_steps=3 stopped it
        # the run that owns the folder continuing in it (any other run is refused there: test_run_folder_reuse.py)
        with pytest.raises(
            CheckpointWriteError, match=rf"{folder.name} holds files a checkpoint does not \(notes.txt\)"
        ):
            train(cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp / "a")
        assert (folder / "notes.txt").read_text() == "mine"
    finally:
        (folder / "notes.txt").unlink()
        if where != "latest":
            shutil.rmtree(folder)


# -- the folder: replaced by a live run while another process resumes from it ---------------------------


def newer_checkpoint(latest: Path, dest: Path) -> Path:
    """A sealed copy of `latest` one step on (as the live run's next save would be), at `dest`."""
    shutil.copytree(latest, dest)
    edit_state(dest, lambda s: s["progress"].update(opt_steps=s["progress"]["opt_steps"] + 1))
    ckpt.seal(dest)
    return dest


def test_a_latest_old_being_removed_is_read_from_the_latest_renamed_in(fresh):  # noqa: F811
    """``find`` may hand over ``.latest.old`` (between the writer's two renames), which the writer then empties
    file by file: the read goes to the new ``latest/``, never "model.safetensors is missing"."""
    _tmp, latest = fresh
    old = latest.with_name(".latest.old")
    os.replace(latest, old)
    newer_checkpoint(old, latest)
    steps = json.loads((latest / "state.json").read_text())["progress"]["opt_steps"]
    for name in ("model.safetensors", "optimizer.safetensors"):  # the writer's remove(old), cut half way
        (old / name).unlink()
        assert ckpt.read_state(old)["progress"]["opt_steps"] == steps
    shutil.rmtree(old)


def test_a_folder_replaced_after_its_seal_was_removed_is_read_again(fresh, monkeypatch):  # noqa: F811
    """The reader has every file but checksums.json when the writer replaces latest/ and removes the old
    folder: what it holds is a sealed checkpoint without its seal, so it reads the new latest/ instead of
    refusing ("checksums.json is missing") or taking it for an older version's unsealed one."""
    from tcgexp.lifecycle import ckpt_files

    _tmp, latest = fresh
    steps = json.loads((latest / "state.json").read_text())["progress"]["opt_steps"]
    tmp_new = newer_checkpoint(latest, latest.with_name(".latest.tmp"))
    real_open, fired = os.open, []

    def open_racing(name, flags, *args, **kwargs):
        if name == ckpt.CHECKSUMS and kwargs.get("dir_fd") is not None and not fired:
            fired.append(name)
            ckpt_files.replace(tmp_new, latest)  # the live run's save, at this very moment
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_racing)
    state = ckpt.read_state(latest)
    assert fired and state["progress"]["opt_steps"] == steps + 1


WRITER = ["checkpoint.latest_every_steps=1", "trainer.epochs=200", "tracking=off"]
TINY_ARGS = [a for a in TINY_TRAIN if not a.startswith(("trainer.epochs", "checkpoint.latest_every_steps", "tracking"))]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["read_state-then-load", "load"])
def test_a_resume_reads_one_checkpoint_while_a_live_run_replaces_it(stopped, what, tmp_path):  # noqa: F811
    """A run writing latest/ at every step; another process reads it over and over, as a resume does
    (read_state, then load): every read is one checkpoint (its optimizer's step counter equals its
    state's opt_steps, its files verify) or one line refusing it, never a mix or a raw error."""
    from tcgexp.config import build
    from tcgexp.games import sim

    tmp, _ = stopped
    run_dir = tmp_path / "live"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"dataset.root={tmp / 'data'}",
            *TINY_ARGS,
            *WRITER,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    latest = run_dir / "checkpoints" / "latest"
    c = cfg(tmp / "data")
    consistent = refused = 0
    try:
        deadline = time.monotonic() + 120
        while not (latest / "state.json").exists():
            assert writer.poll() is None and time.monotonic() < deadline, writer.stderr.read()[-3000:]
            time.sleep(0.05)
        end = time.monotonic() + 8  # (the code before these checks got ~5 mixed or raw reads in 1000 here)
        while time.monotonic() < end and writer.poll() is None:
            model = build(c.model)(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM)
            optimizer = build(c.optimizer)(build(c.scheduler)(run_steps=10_000))
            optimizer.init(model.trainable_parameters())
            try:
                planned = ckpt.read_state(find(str(run_dir))) if what != "load" else None
                state, _ = ckpt.load(
                    find(str(run_dir)),
                    model=model,
                    optimizer=optimizer,
                    **({"expect": planned} if planned is not None else {}),
                )
            except CheckpointError as exc:
                assert "\n" not in str(exc) and "while this resume read it" in str(exc), str(exc)
                refused += 1
                continue
            assert int(optimizer.state["step"].item()) == state["progress"]["opt_steps"], "a mixed checkpoint"
            consistent += 1
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    assert consistent > 0, f"no read succeeded ({refused} refused)"
