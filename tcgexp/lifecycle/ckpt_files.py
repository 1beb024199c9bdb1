"""A checkpoint's folder: the files it holds, replacing it without harm, reading it whole.

Why each rule exists:

- Replacing ``latest/`` used to be ``rmtree`` of the previous folder: a file somebody put in it,
  or a ``latest`` that was a link to a folder of theirs, went with it (or the link's target was
  written into). A checkpoint folder is replaced only when it holds nothing but the files a
  checkpoint has, and is a real folder; anything else is one ``CheckpointWriteError`` naming it,
  nothing deleted. ``train()`` checks its run dir's checkpoint folders before the first step, so
  that refusal comes at start-up, not at the first checkpoint.
- A resume from a run whose ``latest/`` is being replaced (the run is live, or its rename was
  cut short) could read ``state.json`` of one checkpoint and the weights of the next. Every file
  is read through one handle on the folder (``openat``): a rename moves the folder, not the files
  under that handle, so what is read is one checkpoint; if the writer deleted the old folder's
  files before they were opened, the read starts again on the new ``latest/`` (a few times, then
  one line). The bytes are then verified and parsed from memory, never read twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from ..overrides import shell_override

FILES = ("model.safetensors", "optimizer.safetensors", "lanes.safetensors", "state.json")
CHECKSUMS = "checksums.json"  # written last: a checkpoint is sealed once it exists
OURS = (*FILES, CHECKSUMS)
FORMAT = 2  # state.json's checkpoint_format: 2 = sealed by checksums.json (1: before it was recorded)
SEALED_ONLY = ("world",)  # state.json keys that only versions sealing their checkpoints wrote
ATTEMPTS = 5  # reads of a folder a live run keeps replacing


class CheckpointError(ValueError):
    pass


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, I/O error): loud, and the previous one is kept."""


def foreign(path: Path) -> list[str]:
    """What in checkpoint folder `path` a checkpoint does not hold (a link or a file at `path`: itself)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        return [path.name]
    if not path.exists():
        return []
    return sorted(e.name for e in path.iterdir() if e.name not in OURS or e.is_symlink() or not e.is_file())


def check_replaceable(path: Path) -> None:
    """Refuse to replace or remove checkpoint folder `path` (or its temporary siblings) unless it is a
    real folder holding only a checkpoint's files; nothing is touched."""
    for p in (path, path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.old")):
        odd = foreign(p)
        if odd:
            what = (
                f"is a link to {os.readlink(p)}"
                if p.is_symlink()
                else "is a file"
                if odd == [p.name]
                else f"holds files a checkpoint does not ({', '.join(odd[:3])})"
            )
            raise CheckpointWriteError(
                f"not writing checkpoint {path}: {p} {what}, and tcgexp replaces that folder "
                "whole; nothing was deleted: move it out of the run dir, or give the run a "
                "new folder (hydra.run.dir=...)"
            )


def check_folder(ckpt_dir: Path) -> None:
    """Before a run's first step: every checkpoint folder it may replace can be replaced."""
    if not ckpt_dir.is_dir():
        return
    for entry in ckpt_dir.iterdir():
        name = entry.name.lstrip(".").removesuffix(".tmp").removesuffix(".old")
        if name in ("latest", "best") or name.startswith("epoch_"):
            check_replaceable(ckpt_dir / name)


def remove(path: Path) -> None:
    """Remove a checkpoint folder holding only a checkpoint's files (checked by the caller)."""
    if not path.is_dir() or path.is_symlink():
        return
    for name in OURS:
        (path / name).unlink(missing_ok=True)
    try:
        path.rmdir()
    except OSError:  # something was put there since the check: left, and the next save refuses it by name
        pass


def replace(tmp: Path, path: Path) -> None:
    """Move the complete checkpoint `tmp` into place at `path`; the previous one is removed after the rename
    (a crash between the renames leaves ``.<name>.old``, which ``find`` still reads)."""
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        remove(old)
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    remove(old)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_once(path: Path) -> tuple[dict[str, bytes], bool]:
    """(name -> bytes of every checkpoint file present, whether the folder was replaced while read)."""
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = {}
        for name in OURS:
            try:
                fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
            except FileNotFoundError:
                continue
            with os.fdopen(fd, "rb") as fh:
                out[name] = fh.read()
        try:
            replaced = os.stat(path).st_ino != os.fstat(dfd).st_ino
        except FileNotFoundError:
            replaced = True
    finally:
        os.close(dfd)
    return out, replaced


def _newer(path: Path) -> Path | None:
    """The folder a live run renames in after ``.<name>.old`` (``latest/`` for ``.latest.old``), or None."""
    if path.name.startswith(".") and path.name.endswith(".old"):
        return path.with_name(path.name[1 : -len(".old")])
    return None


def read_files(path: Path) -> tuple[Path, dict[str, bytes]]:
    """One checkpoint's files, read whole while a live run may be replacing the folder: (where, bytes).

    A folder that moved while it was read (or a ``.latest.old`` whose ``latest/`` exists: the writer is
    removing it) is read again, on the new ``latest/``; only a folder nobody replaced can be incomplete."""
    path = Path(path)
    for attempt in range(ATTEMPTS):
        newer = _newer(path)
        if newer is not None and (newer.is_dir() or not path.is_dir()):  # the one a live run renamed in
            path = newer
        try:
            files, replaced = _read_once(path)
        except FileNotFoundError:
            files, replaced = {}, True
        except NotADirectoryError as exc:
            raise CheckpointError(f"{path} is not a checkpoint folder (a file)") from exc
        newer = _newer(path)
        moved = replaced or (newer is not None and newer.is_dir())
        missing = [n for n in OURS if n not in files]
        # a checkpoint without checksums.json may be one an older version wrote (verify decides), unless its
        # folder moved or was being removed while it was read: then the writer took the file, read again
        if not missing or (missing == [CHECKSUMS] and not moved):
            return path, files
        if not moved:
            raise CheckpointError(f"{path / missing[0]} is missing: the checkpoint is incomplete")
        time.sleep(0.05 * (attempt + 1))
    raise CheckpointError(
        f"{path} was replaced {ATTEMPTS} times while this resume read it (a live run is writing "
        "it): stop that run first (SIGTERM writes its latest/), or resume from a checkpoint no "
        "run writes (epoch_NNNN/)"
    )


def find(resume: str, key: str = "resume") -> Path:
    """A checkpoint dir, or the latest/ of a run dir (or of its checkpoints/). (Here, beside the folder rules, with no
    MLX: a job's callbacks find a requeued run's checkpoint before the job has set up its BLAS.) `key`: the config
    key the path was given as (``resume``, ``init_from``), which the messages name.

    A ``latest/`` (or ``.latest.old``) found inside a run dir must be a real folder: tcgexp replaces it
    by renaming folders, so a link there is not what a run wrote (``resume=`` its target instead).
    """
    p = Path(resume).expanduser()
    # a crash between the two renames leaves only .latest.old: still a complete checkpoint
    for cand in (
        p,
        p / "latest",
        p / "checkpoints" / "latest",
        p.parent / f".{p.name}.old",
        p / ".latest.old",
        p / "checkpoints" / ".latest.old",
    ):
        if (cand / "state.json").exists():
            if cand != p and cand.is_symlink():
                raise CheckpointError(
                    f"{key}={resume}: {cand} is a link to {os.readlink(cand)}, not a checkpoint "
                    f"a run wrote there; {shell_override(key, str(cand.resolve()))} reads that checkpoint itself"
                )
            return cand
    raise CheckpointError(
        f"{key}={resume}: no checkpoint there (looked for state.json in it, latest/ and "
        "checkpoints/latest/); pass a run dir or a checkpoint dir"
    )


def _digest(files: dict) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def verify(path: Path, files: dict[str, bytes] | None = None) -> bool:
    """Refuse a checkpoint whose files differ from ``checksums.json``, naming the file.

    `files`: the checkpoint's bytes as read (``ckpt_files.read_files``). True when verified; False
    for a checkpoint without ``checksums.json`` (the caller decides whether it may be one).
    """
    path = Path(path)
    files = files if files is not None else read_files(path)[1]
    if CHECKSUMS not in files:
        return False
    try:
        record = json.loads(files[CHECKSUMS])
        sums = record["files"]
        ok = isinstance(sums, dict) and set(sums) == set(FILES) and record["sha256"] == _digest(sums)
    except (ValueError, KeyError, TypeError) as exc:
        raise _damaged(path / CHECKSUMS, exc) from exc
    if not ok:
        raise _damaged(path / CHECKSUMS, "its own digest does not match its list of files")
    for name in FILES:
        if hashlib.sha256(files[name]).hexdigest() != sums[name]:
            raise _damaged(path / name, "sha256 differs from checksums.json")
    return True


def _damaged(path: Path, why) -> CheckpointError:
    why = f"{type(why).__name__}: {why}" if isinstance(why, Exception) else why
    return CheckpointError(f"{path} is damaged ({why}); resume from another checkpoint (epoch_NNNN/ or best/)")


def _state(path: Path, files: dict[str, bytes]) -> dict:
    """state.json of a checkpoint read whole: verified, parsed, and refused if its seal is gone."""
    sealed = verify(path, files)
    try:
        state = json.loads(files["state.json"])
    except ValueError as exc:
        raise _damaged(path / "state.json", exc) from exc
    if not isinstance(state, dict) or not isinstance(state.get("progress"), dict):
        raise _damaged(path / "state.json", "no progress record")
    if not sealed and (int(state.get("checkpoint_format") or 1) >= FORMAT or any(k in state for k in SEALED_ONLY)):
        raise CheckpointError(
            f"{path / CHECKSUMS} is missing, and this checkpoint was written sealed by it (state.json "
            f"says checkpoint_format {state.get('checkpoint_format', FORMAT)}): its files cannot be "
            "trusted; resume from another checkpoint (epoch_NNNN/ or best/)"
        )
    return state


def read_state(path: Path) -> dict:
    """The checkpoint's state.json (progress, schedule, config, provenance), its files verified first."""
    path, files = read_files(path)
    return _state(path, files)
