"""``result.json``: written whole (a temporary file renamed into place), and by a survivor when rank 0 died.

Why: one ``result.json`` per run is rank 0's to write, but a run whose rank 0 was killed left none at
all (and ``mlx.launch`` exited 0), so nothing on disk said the run had failed. When the ranks can no
longer work together, every survivor leaves its own ``failed`` result unless one is already there;
rank 0, alive, replaces it with its own. A run lost before its loop (a peer gone at start-up) leaves
the same, naming the line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..learn.diverge import strict

NAME = "result.json"
_WRITTEN: dict[str, float] = {}  # result.json files this process wrote, and when (time.time())


def write_result(run_dir: Path, result: dict, *, replace: bool = True) -> bool:
    """Write `result` as the run's result.json; `replace=False`: only if there is none yet. True if written."""
    final = Path(run_dir) / NAME
    tmp = final.with_name(f".{NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2, default=float, allow_nan=False))
    try:
        if replace:
            os.replace(tmp, final)
        else:
            try:
                os.link(tmp, final)  # atomic, and never over another rank's
            except FileExistsError:
                return False
        _WRITTEN[str(final.absolute())] = time.time()
        return True
    finally:
        tmp.unlink(missing_ok=True)


def written_since(run_dir: Path, since: float) -> bool:
    """Whether the run dir's result.json was written at or after `since` (``time.time()``): by this run (this
    process's own record of it: a file system's coarse mtime could say otherwise), or by another process."""
    final = Path(run_dir) / NAME
    if _WRITTEN.get(str(final.absolute()), float("-inf")) >= since:
        return True
    try:
        return final.stat().st_mtime >= since
    except OSError:
        return False


def leave_ending(
    run_dir: Path, status: str, error: str, *, signal: str | None, since: float, rank: int, world_size: int
) -> bool:
    """A run that ended where the trainer writes no result (a second signal, a wait for data abandoned, a
    crash outside the loop): result.json says how, unless this run wrote one already. Other ranks than 0
    never replace one. True if written."""
    if not Path(run_dir).is_dir() or written_since(run_dir, since):
        return False
    record = {
        "status": status,
        "error": error,
        "signal": signal,
        "run_dir": str(run_dir),
        "world_size": world_size,
        "written_by_rank": rank,
    }
    try:
        return write_result(run_dir, strict(record), replace=rank == 0)
    except OSError:  # a full or read-only disk: the one line on stderr is all that can be left
        return False


def leave_failed(run_dir: Path, error: str, *, rank: int, world_size: int) -> None:
    """A run whose ranks broke apart outside the loop: result.json says failed, unless one is there."""
    if Path(run_dir).is_dir():
        write_result(
            run_dir,
            strict(
                {
                    "status": "failed",
                    "error": error,
                    "signal": None,
                    "run_dir": str(run_dir),
                    "world_size": world_size,
                    "written_by_rank": rank,
                }
            ),
            replace=False,
        )
