"""A damaged checkpoint is refused at load, naming the file; its state is checked against the plan then too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.train import train
from tests.conftest import compose_config
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def cfg(root, *more):
    return compose_config(f"dataset.root={root}", *TINY_TRAIN, "trainer.epochs=1", *more)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A run stopped mid-epoch (latest/ to resume from), and a pristine copy of its latest/."""
    tmp = tmp_path_factory.mktemp("ckpt")
    train(cfg(tmp / "data", "trainer.max_steps=3"), run_dir=tmp / "a")
    latest = tmp / "a" / "checkpoints" / "latest"
    shutil.copytree(latest, tmp / "pristine")
    return tmp, latest


@pytest.fixture
def fresh(stopped):
    tmp, latest = stopped
    shutil.rmtree(latest)
    shutil.copytree(tmp / "pristine", latest)
    return tmp, latest


def flip(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01  # one bit of one byte: same size, still parses
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", [*ckpt.FILES, ckpt.CHECKSUMS])
def test_one_flipped_byte_in_any_checkpoint_file_is_refused_naming_it(fresh, name, tmp_path):
    tmp, latest = fresh
    assert (latest / ckpt.CHECKSUMS).exists(), "every checkpoint is sealed"
    flip(latest / name)
    with pytest.raises(CheckpointError) as err:
        train(cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp_path / "b")
    msg = str(err.value)
    assert f"{latest / name} is damaged" in msg and "\n" not in msg
    assert not (tmp_path / "b" / "checkpoints").exists(), "refused before any step"


def test_an_exponent_byte_flipped_in_the_weights_never_trains(fresh, tmp_path):
    """The case that used to train NaN and exit 0: a float32's top byte (sign + exponent)."""
    tmp, latest = fresh
    path = latest / "model.safetensors"
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    data[header + 3] ^= 0x7F  # the first weight's exponent
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors is damaged"):
        train(cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp_path / "b")


def test_the_command_line_exits_non_zero_with_one_line_naming_the_file(fresh, tmp_path):
    tmp, latest = fresh
    flip(latest / "state.json")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"resume={tmp / 'a'}",
            f"dataset.root={tmp / 'data'}",
            f"hydra.run.dir={tmp_path / 'b'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"{latest / 'state.json'} is damaged" in last, proc.stderr[-2000:]


def reseal_state(latest: Path, edit) -> None:
    """Edit state.json's progress and re-seal: only the plan check can notice."""
    state = json.loads((latest / "state.json").read_text())
    edit(state["progress"])
    (latest / "state.json").write_text(json.dumps(state))
    ckpt.seal(latest)


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda p: p.update(position=p["position"] + 10_000), "outside epoch 1"),
        (lambda p: p.update(epoch_microbatches=p["epoch_microbatches"] + 1), "epoch_microbatches="),
        (lambda p: p.update(opt_steps=p["opt_steps"] + 1), "opt_steps="),
        (lambda p: p.update(epoch=5), "trainer.epochs=1"),
    ],
    ids=["position", "epoch_microbatches", "opt_steps", "epoch"],
)
def test_a_state_that_disagrees_with_the_plan_is_refused_at_load(fresh, edit, says, tmp_path):
    tmp, latest = fresh
    reseal_state(latest, edit)
    with pytest.raises(CheckpointError) as err:
        train(cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp_path / "b")
    assert str(latest / "state.json") in str(err.value) and says in str(err.value)


def test_lane_ids_outside_the_lane_index_are_refused(fresh, tmp_path):
    import mlx.core as mx
    import numpy as np

    tmp, latest = fresh
    tensors = dict(mx.load(str(latest / "lanes.safetensors")))
    ids = np.array(tensors["train.ids"])
    ids[-1] = int(np.array(tensors["train.shape"])[0]) + 7
    tensors["train.ids"] = mx.array(ids)
    mx.save_safetensors(str(latest / "lanes.safetensors"), tensors)
    ckpt.seal(latest)
    with pytest.raises(CheckpointError, match=r"lanes\.safetensors: train lane ids are not unique ids in"):
        train(cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp_path / "b")


def make_legacy(latest: Path) -> None:
    """What a version from before checksums wrote: no checksums.json, no checkpoint_format, no world."""
    (latest / ckpt.CHECKSUMS).unlink()
    state = json.loads((latest / "state.json").read_text())
    for key in ("checkpoint_format", "world"):
        state.pop(key, None)
    (latest / "state.json").write_text(json.dumps(state))


def test_a_checkpoint_from_before_checksums_is_accepted_with_a_warning(fresh, tmp_path):
    from io import StringIO

    from rich.console import Console

    tmp, latest = fresh
    make_legacy(latest)
    out = StringIO()
    result = train(
        cfg(tmp / "data", f"resume={tmp / 'a'}"), run_dir=tmp_path / "b", console=Console(file=out, width=300)
    )
    assert result["status"] == "completed"
    assert "predates checkpoint checksums" in out.getvalue()
