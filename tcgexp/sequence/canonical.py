"""The canonical model: a sealed checkpoint at ``<sequence folder>/canonical``, replaced whole or not at all.

A phase's finished checkpoint is read whole and verified (``ckpt_files.read_files``, its checksums), written into
``.canonical.tmp`` with every file fsynced, and renamed into place (``ckpt_files.replace``: the previous one moved
aside first, removed after). A reader (an export, an evaluation, the next phase's ``init_from``) sees the previous
canonical model or the new one, never a mix: a crash between the two renames leaves ``.canonical.old``, which
``ckpt_files.find`` reads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..errors import ConfigError
from ..lifecycle.ckpt_files import CheckpointError, _state, find, fsync_dir, read_files, replace

NAME = "canonical"


def weights_sha256(files: dict[str, bytes]) -> str:
    return hashlib.sha256(files["model.safetensors"]).hexdigest()


def publish(src: Path, folder: Path) -> str:
    """Copy the checkpoint `src` to `folder`/canonical atomically; the sha256 of its weights."""
    path, files = read_files(Path(src))
    _state(path, files)  # verified against its checksums before it becomes what everyone reads
    tmp = folder / f".{NAME}.tmp"
    if tmp.exists():  # a copy a killed sequence left half-written
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in files.items():
        with open(tmp / name, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    fsync_dir(tmp)
    replace(tmp, folder / NAME)
    return weights_sha256(files)


def current(folder: Path) -> str | None:
    """The sha256 of the canonical model's weights (verified), or None where there is none yet."""
    where = folder / NAME
    if not where.exists() and not (folder / f".{NAME}.old").exists():
        return None
    path, files = read_files(find(str(where), key="sequence.folder"))
    _state(path, files)
    return weights_sha256(files)


def finished_weights(run_dir: Path) -> str | None:
    """The sha256 of the weights a phase's run last wrote (its latest/), or None where it wrote none."""
    try:
        _, files = read_files(find(str(run_dir)))
    except (CheckpointError, OSError):
        return None
    return weights_sha256(files)


def check(folder: Path, state, days: list[str]) -> None:
    """The canonical model is the last recorded phase's, or the next phase's finished one (a kill between the copy
    and the record); anything else is someone else's model: refused, nothing touched."""
    try:
        have = current(folder)
    except CheckpointError as exc:
        raise ConfigError(f"{folder / NAME} cannot be read ({exc})") from None
    done = [p for p in state.phases if p.get("canonical_sha256")]
    if have is None:
        if done:
            raise ConfigError(
                f"{folder / 'sequence.json'} records {len(done)} phase(s) but {folder / NAME} is gone: restore it, "
                "or start another sequence.folder"
            )
        return
    if done and done[-1]["canonical_sha256"] == have:
        return
    nxt = next((d for d in days if not state.recorded(d)), None)
    if nxt is not None and have == finished_weights(folder / "phases" / nxt):
        return
    raise ConfigError(
        f"{folder} holds a canonical model ({NAME}/, weights {have[:12]}) that "
        + (
            "no sequence.json records"
            if not state.phases
            else f"is not the last recorded phase's ({done[-1]['day'] if done else 'none'})"
        )
        + ": a fresh sequence never overwrites it; choose another sequence.folder, or move that folder away"
    )
