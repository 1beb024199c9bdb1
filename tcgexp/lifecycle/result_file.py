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
from pathlib import Path

from ..learn.diverge import strict

NAME = "result.json"


def write_result(run_dir: Path, result: dict, *, replace: bool = True) -> bool:
    """Write `result` as the run's result.json; `replace=False`: only if there is none yet. True if written."""
    final = Path(run_dir) / NAME
    tmp = final.with_name(f".{NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2, default=float, allow_nan=False))
    try:
        if replace:
            os.replace(tmp, final)
            return True
        try:
            os.link(tmp, final)  # atomic, and never over another rank's
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)


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
