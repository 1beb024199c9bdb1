"""A checkpoint's weights as numpy arrays, without MLX: what a player of the trained policy needs.

``read_weights(path)`` reads a checkpoint folder whole (``ckpt_files.read_files``), verifies it against its
``checksums.json`` as a resume does, and parses ``model.safetensors`` (an 8-byte header length, a JSON header
naming each tensor's dtype, shape and byte range, then the bytes) into ``{name: array}``, with the
checkpoint's ``state.json``. ``checkpoint_of(run_dir, which)`` finds ``best/``, ``latest/`` or
``epoch_NNNN/`` of a run dir (or takes a checkpoint folder as it is).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .ckpt_files import CheckpointError, _state, read_files

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def parse_safetensors(data: bytes, where: Path) -> dict[str, np.ndarray]:
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + n])
        body = memoryview(data)[8 + n :]
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = DTYPES.get(info["dtype"])
            if dtype is None:
                raise ValueError(f"tensor {name} has dtype {info['dtype']}, which this reader does not take")
            lo, hi = info["data_offsets"]
            out[name] = np.frombuffer(body[lo:hi], dtype=dtype).reshape(info["shape"]).copy()
        return out
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise CheckpointError(f"{where} cannot be read ({type(exc).__name__}: {exc})") from exc


def checkpoint_of(run_dir: Path, which: str) -> Path:
    """The checkpoint folder `which` (best, latest, epoch_NNNN) of a run dir; a checkpoint folder is itself."""
    p = Path(run_dir).expanduser()
    if (p / "state.json").is_file():
        return p
    for cand in (p / "checkpoints" / which, p / which):
        if (cand / "state.json").is_file():
            return cand
    have = sorted(d.name for d in (p / "checkpoints").iterdir() if d.is_dir()) if (p / "checkpoints").is_dir() else []
    raise CheckpointError(
        f"{p} has no checkpoint {which}/ (looked in {p / 'checkpoints' / which}); "
        + (f"it has {', '.join(have)}: eval.checkpoint chooses one" if have else "is it a run dir tcgexp-train wrote?")
    )


def read_weights(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """(weights by name, state.json) of the checkpoint folder `path`, its files verified."""
    path, files = read_files(Path(path))
    state = _state(path, files)
    return parse_safetensors(files["model.safetensors"], path / "model.safetensors"), state
