"""Play as a metric: the trained policy against opponents in the real game's engine, its win rate with an
interval, in ``result.json`` (``eval.<opponent>``), in Aim (``eval/win_rate/<opponent>``) and so in a sweep's
findings. ``tcgexp-eval <run dir> [eval.key=value ...]`` plays a finished run (or every finished job of a sweep
dir, whose report it then rewrites); a run with ``eval.enabled=true`` plays at its end.

The policy is the network's own choices (``tcgexp/games/cabt/netpolicy.py``: the highest-scoring offered option at
each pick, the stop head where stopping is the agent's choice), from the weights of ``eval.checkpoint``
written into a policy file (``tcgexp/games/cabt/policyfile.py``), the very file ``tcgexp-export`` ships; it plays
with ``eval.deck`` (by default the demo's best teacher's). How the games are played and counted:
``tcgexp/games/cabt/arena.py``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError
from ..eval.evaluate import evaluate_dir
from ..lifecycle.ckpt_files import CheckpointError
from ..lifecycle.result_file import NAME as RESULT

USAGE = "usage: tcgexp-eval <run dir | sweep dir> [eval.key=value ...]"


def targets(path: Path) -> list[Path]:
    """The run dirs `path` names: itself (a run dir), or a sweep dir's completed jobs."""
    if (path / RESULT).is_file():
        return [path]
    from ..report.summary import job_dirs

    if not path.is_dir():
        raise ConfigError(f"{path} is no folder: {USAGE}")
    jobs = []
    for d in job_dirs(path):
        try:
            if json.loads((d / RESULT).read_text()).get("status") in ("completed", "stopped"):
                jobs.append(d)
        except (OSError, ValueError):
            continue
    if not jobs:
        raise ConfigError(f"{path} holds no finished run (no {RESULT}, nor job folders with one): {USAGE}")
    return jobs


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except (ConfigError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def main(argv: list[str] | None = None) -> int:
    """``tcgexp-eval <run dir | sweep dir> [eval.key=value ...]``."""
    from ..learn.blas import setup

    setup()  # nothing here loads MLX; an entry point sets its BLAS up all the same
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0 if args else 2
    with _user_errors():
        path, overrides = Path(args[0]), args[1:]
        runs = targets(path)
        for run_dir in runs:
            if len(runs) > 1:
                print(f"[eval] {run_dir}", flush=True)
            evaluate_dir(run_dir, overrides, console=lambda s: print(s, flush=True))
        if len(runs) > 1 or runs[0] != path:
            from ..report.summary import write_summary

            write_summary(path, ended=True)
            print(f"[eval] the sweep's report is rewritten with the win rates: tcgexp-report {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
