"""A rank's exit status, for ``tcgexp-launch`` (``launcher.py``): ``rank<r>.json`` in ``$TCGEXP_RANK_STATUS``.

Each rank of a launch writes its pid, and once it knows them the world size and its run dir
(``note_rank``, from ``train()``), then its exit code as it leaves (``reports_exit``, around the
entry point). Nothing is written unless the launcher asked (the variable set) and this process is a
rank. A status that cannot be written costs only the launcher's report.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..launch import launched, launched_rank

STATUS_VAR = "TCGEXP_RANK_STATUS"


def note_rank(**fields: Any) -> None:
    """Add `fields` to this rank's status file (when a tcgexp-launch asked for one)."""
    folder = os.environ.get(STATUS_VAR)
    if not folder or not launched():
        return
    path = Path(folder) / f"rank{launched_rank()}.json"
    try:
        status = json.loads(path.read_text()) if path.exists() else {}
        status.update(rank=launched_rank(), pid=os.getpid(), host=socket.gethostname(), **fields)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(status, default=str))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # a status nobody can read costs only the launcher's report


def exit_code(code: Any) -> int:
    """A SystemExit's code as the process's exit status."""
    return 0 if code is None else code if isinstance(code, int) else 1


def reports_exit(main: Callable[..., Any]) -> Callable[..., Any]:
    """Around an entry point's ``main``: this rank's exit code goes into its status file."""

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        code = 1
        try:
            out = main(*args, **kwargs)
            code = 0
            return out
        except SystemExit as exc:
            code = exit_code(exc.code)
            raise
        except KeyboardInterrupt:
            code = 128 + int(signal.SIGINT)
            raise
        finally:
            note_rank(code=code)

    return wrapper
