"""Checkpoints: model.safetensors, optimizer.safetensors, lanes.safetensors, state.json.

Lane memories are stored sparse: the ids and rows of the lanes whose memory a
resume needs (``live`` ids when the caller knows them, else the non-zero rows)
plus the dense shape; every other lane is zero by the reset rule (memory is
zeroed at epoch start and a lane's first chunk reads zeros), so the file grows
with the lanes in flight, not with the corpus.

Every checkpoint directory is written whole into a temporary sibling, fsynced,
then renamed into place (the old one is moved aside first and removed only
after the rename), so a crash at any instant leaves either the previous
checkpoint or the new one, never a half-written directory where a resume
would read it.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from .diverge import strict

FILES = ("model.safetensors", "optimizer.safetensors", "lanes.safetensors", "state.json")


class CheckpointError(ValueError):
    pass


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, I/O error): loud, and the previous one is kept."""


@dataclass
class SparseLanes:
    """Rows `ids` of a [lanes, hidden] float32 memory whose other rows are zero."""

    shape: tuple[int, int]
    ids: np.ndarray  # int64 [k], sorted
    rows: np.ndarray  # float32 [k, hidden]

    @classmethod
    def of(cls, h: np.ndarray, live: Optional[np.ndarray] = None) -> "SparseLanes":
        ids = np.flatnonzero(np.any(h != 0, axis=1)) if live is None else np.unique(np.asarray(live, np.int64))
        return cls(tuple(h.shape), ids.astype(np.int64), np.ascontiguousarray(h[ids]))

    def dense(self) -> np.ndarray:
        h = np.zeros(self.shape, np.float32)
        h[self.ids] = self.rows
        return h


Lanes = Union[np.ndarray, SparseLanes]


def _lane_tensors(lanes: dict[str, Lanes]) -> dict[str, mx.array]:
    out = {}
    for name, v in lanes.items():
        sp = v if isinstance(v, SparseLanes) else SparseLanes.of(v)
        out.update({f"{name}.ids": mx.array(sp.ids), f"{name}.rows": mx.array(sp.rows),
                    f"{name}.shape": mx.array(np.array(sp.shape, np.int64))})
    return out


def _lane_arrays(tensors: dict) -> dict[str, np.ndarray]:
    """Dense arrays back; a checkpoint written before lanes were sparse holds them dense."""
    out = {}
    for key, v in tensors.items():
        if key.endswith(".shape"):
            name = key[:-len(".shape")]
            shape = tuple(int(x) for x in np.array(v))
            out[name] = SparseLanes(shape, np.array(tensors[f"{name}.ids"]),
                                    np.array(tensors[f"{name}.rows"]).reshape(-1, shape[1])).dense()
        elif not key.endswith((".ids", ".rows")):
            out[key] = np.array(v)
    return out


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_finite_weights(model, path: Path) -> None:
    """Never write a checkpoint from NaN/inf weights: a resume from it could only train garbage."""
    for name, value in tree_flatten(model.parameters()):
        if not bool(mx.all(mx.isfinite(value)).item()):
            raise CheckpointError(f"not writing checkpoint {path}: parameter {name} holds NaN or infinity "
                                  "(the run diverged); the previous checkpoint is kept")


def save(path: Path, *, model, optimizer, lanes: dict[str, Lanes], state: dict) -> None:
    path = Path(path)
    check_finite_weights(model, path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        _write(tmp, model=model, optimizer=optimizer, lanes=lanes, state=state)
    except Exception as exc:  # MLX reports a full disk as RuntimeError, json/os as OSError
        shutil.rmtree(tmp, ignore_errors=True)
        kept = "the previous one is kept" if path.exists() else "there is no earlier one"
        raise CheckpointWriteError(f"writing checkpoint {path} failed ({type(exc).__name__}: {exc}); {kept}; "
                                   "free disk space and resume") from exc
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def _write(tmp: Path, *, model, optimizer, lanes: dict[str, Lanes], state: dict) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    mx.save_safetensors(str(tmp / "model.safetensors"), dict(tree_flatten(model.parameters())))
    mx.save_safetensors(str(tmp / "optimizer.safetensors"), dict(tree_flatten(optimizer.state)))
    mx.save_safetensors(str(tmp / "lanes.safetensors"), _lane_tensors(lanes))
    (tmp / "state.json").write_text(json.dumps(strict(state), indent=2, sort_keys=True, default=str, allow_nan=False))
    for name in FILES:
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    _fsync_dir(tmp)


def find(resume: str) -> Path:
    """A checkpoint dir, or the latest/ of a run dir (or of its checkpoints/)."""
    p = Path(resume).expanduser()
    for cand in (p, p / "latest", p / "checkpoints" / "latest"):
        if (cand / "state.json").exists():
            return cand
    # a crash between the two renames leaves only .latest.old: still a complete checkpoint
    for cand in (p.parent / f".{p.name}.old", p / ".latest.old", p / "checkpoints" / ".latest.old"):
        if (cand / "state.json").exists():
            return cand
    raise CheckpointError(f"resume={resume}: no checkpoint there (looked for state.json in it, latest/ and "
                          "checkpoints/latest/); pass a run dir or a checkpoint dir")


def _damaged(path: Path, exc: Exception) -> CheckpointError:
    return CheckpointError(f"{path} is damaged ({type(exc).__name__}: {exc}); resume from another "
                           "checkpoint (epoch_NNNN/ or best/)")


def read_state(path: Path) -> dict:
    """The checkpoint's state.json (progress, schedule, config, provenance), before any weights are read."""
    path = Path(path)
    for name in FILES:
        if not (path / name).exists():
            raise CheckpointError(f"{path / name} is missing: the checkpoint is incomplete")
    try:
        return json.loads((path / "state.json").read_text())
    except ValueError as exc:
        raise _damaged(path, exc) from exc


def load(path: Path, *, model, optimizer) -> tuple[dict, dict[str, np.ndarray]]:
    """Restore model and optimizer in place; return (state, lane arrays)."""
    path = Path(path)
    state = read_state(path)
    try:
        params = mx.load(str(path / "model.safetensors"))
        opt = mx.load(str(path / "optimizer.safetensors"))
        lanes = _lane_arrays(mx.load(str(path / "lanes.safetensors")))
    except Exception as exc:  # safetensors parse errors have no common base class
        raise _damaged(path, exc) from exc
    expected = dict(tree_flatten(model.parameters()))
    if set(params) != set(expected) or any(params[k].shape != expected[k].shape for k in expected):
        raise CheckpointError(f"{path / 'model.safetensors'} does not match the configured model "
                              "(different model.hidden or feature/action sizes?)")
    model.update(tree_unflatten(list(params.items())))
    optimizer.state = tree_unflatten(list(opt.items()))
    mx.eval(model.parameters(), optimizer.state)
    return state, lanes

