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

``checksums.json`` is written last: the sha256 of every other file, and its
own digest over that list, so one flipped byte anywhere (a weight's exponent,
a digit of ``state.json``, the list itself) is refused at load naming the
file, instead of training NaN or failing an epoch later. ``state.json``
records ``checkpoint_format`` (2: sealed): a checkpoint that says it was
written sealed, or holds what only sealing versions wrote (``world``), and
has no ``checksums.json`` is refused (deleting the seal must not turn
flipped weights into a warning). Only a checkpoint from before checksums is
accepted without one, with a warning: its files are still parsed and its
state still checked against the plan. The optimizer's state is checked at
load against the configured optimizer's own: every key, shape and dtype, and
finite (a missing moment would otherwise restart from zero unnoticed).
How the folder is replaced and read whole: ``ckpt_files``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ..data.manifest import file_sha256
from ..learn.diverge import strict
from .ckpt_files import (
    CHECKSUMS,
    FILES,
    FORMAT,
    SEALED_ONLY,  # noqa: F401 - re-exported
    CheckpointError,
    CheckpointWriteError,
    _damaged,
    _digest,
    _state,
    check_replaceable,
    find,  # noqa: F401 - re-exported: ckpt.find, where the readers look for it
    fsync_dir,
    read_files,
    read_state,  # noqa: F401 - re-exported: ckpt.read_state, where the readers look for it
    replace,
    verify,  # noqa: F401 - re-exported
)


@dataclass
class SparseLanes:
    """Rows `ids` of a [lanes, hidden] float32 memory whose other rows are zero."""

    shape: tuple[int, int]
    ids: np.ndarray  # int64 [k], sorted
    rows: np.ndarray  # float32 [k, hidden]

    @classmethod
    def of(cls, h: np.ndarray, live: np.ndarray | None = None) -> SparseLanes:
        ids = np.flatnonzero(np.any(h != 0, axis=1)) if live is None else np.unique(np.asarray(live, np.int64))
        return cls(tuple(h.shape), ids.astype(np.int64), np.ascontiguousarray(h[ids]))

    def dense(self) -> np.ndarray:
        h = np.zeros(self.shape, np.float32)
        h[self.ids] = self.rows
        return h


Lanes = np.ndarray | SparseLanes


def _lane_tensors(lanes: dict[str, Lanes]) -> dict[str, mx.array]:
    out = {}
    for name, v in lanes.items():
        sp = v if isinstance(v, SparseLanes) else SparseLanes.of(v)
        out.update(
            {
                f"{name}.ids": mx.array(sp.ids),
                f"{name}.rows": mx.array(sp.rows),
                f"{name}.shape": mx.array(np.array(sp.shape, np.int64)),
            }
        )
    return out


def _lane_arrays(tensors: dict) -> dict[str, np.ndarray]:
    """Dense arrays back; a checkpoint written before lanes were sparse holds them dense."""
    out = {}
    for key, v in tensors.items():
        if key.endswith(".shape"):
            name = key[: -len(".shape")]
            shape = tuple(int(x) for x in np.array(v))
            out[name] = SparseLanes(
                shape, np.array(tensors[f"{name}.ids"]), np.array(tensors[f"{name}.rows"]).reshape(-1, shape[1])
            ).dense()
        elif not key.endswith((".ids", ".rows")):
            out[key] = np.array(v)
    return out


def check_finite_weights(model, path: Path) -> None:
    """Never write a checkpoint from NaN/inf weights: a resume from it could only train garbage."""
    check_finite(dict(tree_flatten(model.parameters())), path)


def check_finite(params: dict[str, mx.array], path: Path) -> None:
    """``check_finite_weights`` on a flat parameter dict, the first bad one named. A float32 array is read in
    place (numpy's view of MLX's buffer): ~30 us for the model at hidden 128, where a graph of ``isfinite`` and
    ``all`` per parameter on MLX's stream took 0.8-2.5 ms, while a latest/ save keeps the step waiting."""
    for name, value in params.items():
        if value.dtype == mx.float32:
            ok = bool(np.isfinite(np.asarray(value)).all())
        else:  # (a dtype numpy has no view of, such as bfloat16)
            ok = bool(mx.all(mx.isfinite(value)).item())
        if not ok:
            raise CheckpointError(
                f"not writing checkpoint {path}: parameter {name} holds NaN or infinity "
                "(the run diverged); the previous checkpoint is kept"
            )


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a disk that is full (or a quota reached)."""
    import errno

    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(word in str(exc) for word in ("No space left on device", "Disk quota exceeded")):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@dataclass(frozen=True)
class Snapshot:
    """What one checkpoint holds, taken at one optimizer step, to be written now or later (``write``).

    MLX arrays are immutable and the update replaces them, never changes them: the flat parameter and
    optimizer-state dicts taken here (evaluated) keep this step's values while training goes on, and
    state.json's text is made here, so nothing changed after the step reaches the files. ``write``
    writes the very bytes ``save`` writes at this step."""

    params: dict[str, mx.array]
    optimizer: dict[str, mx.array]
    lanes: dict[str, mx.array]
    state_json: str


def snapshot(*, model, optimizer, lanes: dict[str, Lanes], state: dict) -> Snapshot:
    params = dict(tree_flatten(model.parameters()))
    opt = dict(tree_flatten(optimizer.state))
    mx.eval(list(params.values()), list(opt.values()))
    state = {**state, "checkpoint_format": FORMAT}
    text = json.dumps(strict(state), indent=2, sort_keys=True, default=str, allow_nan=False)
    return Snapshot(params, opt, _lane_tensors(lanes), text)


def save(path: Path, *, model, optimizer, lanes: dict[str, Lanes], state: dict) -> None:
    path = Path(path)
    check_finite_weights(model, path)
    write(path, snapshot(model=model, optimizer=optimizer, lanes=lanes, state=state))


def write(path: Path, snap: Snapshot) -> None:
    """Write `snap` whole at `path` (its weights checked finite by the caller: ``check_finite``). Runs on
    any thread: it reads the snapshot's evaluated arrays and runs no MLX operation."""
    path = Path(path)
    check_replaceable(path)  # a link, or files a checkpoint does not hold: refused, nothing deleted
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        _write(tmp, snap)
    except Exception as exc:  # MLX reports a full disk as RuntimeError, json/os as OSError
        shutil.rmtree(tmp, ignore_errors=True)  # (checked above: only ever our own temporary folder)
        kept = "the previous one is kept" if path.exists() else "there is no earlier one"
        raise CheckpointWriteError(
            f"writing checkpoint {path} failed ({type(exc).__name__}: {exc}); {kept}; free disk space and resume"
        ) from exc
    replace(tmp, path)


def _write(tmp: Path, snap: Snapshot) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    mx.save_safetensors(str(tmp / "model.safetensors"), snap.params)
    mx.save_safetensors(str(tmp / "optimizer.safetensors"), snap.optimizer)
    mx.save_safetensors(str(tmp / "lanes.safetensors"), snap.lanes)
    (tmp / "state.json").write_text(snap.state_json)
    seal(tmp)
    for name in FILES + (CHECKSUMS,):
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(tmp)


def seal(path: Path) -> None:
    """Write ``checksums.json``: every file's sha256, and a digest of that list (so the list checks itself)."""
    files = {name: file_sha256(path / name) for name in FILES}
    (path / CHECKSUMS).write_text(json.dumps({"files": files, "sha256": _digest(files)}, indent=2, sort_keys=True))


def load(
    path: Path, *, model, optimizer, lanes_shape: tuple[int, int] | None = None, expect: dict | None = None
) -> tuple[dict, dict[str, np.ndarray]]:
    """Restore model and optimizer in place; return (state, lane arrays).

    `lanes_shape` (lanes in the index, model.hidden): the lanes file must fit it, ids in range.
    `expect`: the state.json the caller planned the resume from (``read_state``): a checkpoint that a
    live run replaced since is refused, never mixed with it.
    """
    path, files = read_files(path)
    state = _state(path, files)
    if expect is not None and state != expect:
        raise CheckpointError(
            f"{path} was replaced by a newer checkpoint while this resume read it (a live run is "
            "writing it): stop that run first, or resume from a checkpoint no run writes "
            "(epoch_NNNN/)"
        )
    tensors = {}
    for name in ("model.safetensors", "optimizer.safetensors", "lanes.safetensors"):
        try:
            tensors[name] = mx.load(io.BytesIO(files[name]), format="safetensors")
        except Exception as exc:  # safetensors parse errors have no common base class
            raise _damaged(path / name, exc) from exc
    params, opt = tensors["model.safetensors"], tensors["optimizer.safetensors"]
    check_lanes(tensors["lanes.safetensors"], lanes_shape, path / "lanes.safetensors")
    try:
        lanes = _lane_arrays(tensors["lanes.safetensors"])
    except Exception as exc:
        raise _damaged(path / "lanes.safetensors", exc) from exc
    expected = dict(tree_flatten(model.parameters()))
    if set(params) != set(expected) or any(params[k].shape != expected[k].shape for k in expected):
        raise CheckpointError(
            f"{path / 'model.safetensors'} does not match the configured model "
            "(different model.hidden or feature/action sizes?)"
        )
    for name, value in params.items():  # a checkpoint without checksums can still hold a flipped exponent
        if not bool(mx.all(mx.isfinite(value)).item()):
            raise _damaged(path / "model.safetensors", f"parameter {name} holds NaN or infinity")
    check_optimizer(opt, dict(tree_flatten(optimizer.state)), path / "optimizer.safetensors")
    model.update(tree_unflatten(list(params.items())))
    optimizer.state = tree_unflatten(list(opt.items()))
    mx.eval(model.parameters(), optimizer.state)
    return state, lanes


def check_optimizer(saved: dict, fresh: dict, path: Path) -> None:
    """The saved optimizer state must be the configured optimizer's: the same keys (every moment of every
    parameter), shapes and dtypes, all finite. MLX would fill a missing moment with zeros on the next
    step, and a wrong shape fails deep inside the update."""
    missing, extra = sorted(set(fresh) - set(saved)), sorted(set(saved) - set(fresh))
    problem = None
    if missing or extra:
        problem = "; ".join(
            p
            for p in (
                f"missing {', '.join(missing[:3])}" + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
                if missing
                else "",
                f"unexpected {', '.join(extra[:3])}" if extra else "",
            )
            if p
        )
    else:
        for key in sorted(fresh):
            if saved[key].shape != fresh[key].shape or saved[key].dtype != fresh[key].dtype:
                kind = lambda a: f"{str(a.dtype).removeprefix('mlx.core.')}{list(a.shape)}"
                problem = f"{key} is {kind(saved[key])}, the configured optimizer has {kind(fresh[key])}"
                break
            if mx.issubdtype(saved[key].dtype, mx.floating) and not bool(mx.all(mx.isfinite(saved[key])).item()):
                problem = f"{key} holds NaN or infinity"
                break
    if problem:
        raise CheckpointError(
            f"{path} does not hold the configured optimizer's state ({problem}); resume with the "
            "optimizer it was trained with, or from another checkpoint (epoch_NNNN/ or best/)"
        )


def check_lanes(tensors: dict, shape: tuple[int, int] | None, path: Path) -> None:
    """Sparse lane memories must fit the lane index: [lanes, hidden], ids unique, sorted and in range."""
    for key in [k for k in tensors if k.endswith(".shape")]:
        name = key[: -len(".shape")]
        have = tuple(int(x) for x in np.array(tensors[key]))
        ids = np.array(tensors.get(f"{name}.ids", np.empty(0, np.int64)))
        rows = tensors.get(f"{name}.rows")
        problem = None
        if shape is not None and have != tuple(shape):
            problem = f"{name} memory is {list(have)}, the lane index and model.hidden give {list(shape)}"
        elif len(have) != 2 or rows is None or tuple(rows.shape) != (len(ids), have[1]):
            problem = f"{name} ids and rows do not match"
        elif len(ids) and (ids.min() < 0 or ids.max() >= have[0] or np.any(np.diff(ids) <= 0)):
            problem = f"{name} lane ids are not unique ids in [0, {have[0]})"
        if problem:
            raise CheckpointError(
                f"{path}: {problem}; resume with the data and model it was trained with, or from another checkpoint"
            )
