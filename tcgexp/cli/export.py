"""``tcgexp-export <run dir> <folder> [eval.checkpoint=...] [eval.deck=...]``: the submission Kaggle's harness runs.

Writes into `<folder>`: ``main.py`` (numpy only, its last callable ``agent(obs, config)``: ``tcgexp/games/cabt/bundle.py``
says how it finds its weights without ``__file__``), ``tcgexp_policy.npz`` beside it (the weights of the run's
``eval.checkpoint``, the deck of its ``eval.deck``, the card database) and ``submission.tar.gz`` of both. Then
it checks what it wrote, in a process of its own that cannot import tcgexp or MLX, started in another
working directory: ``main.py`` loaded as Kaggle's loader loads it answers the observations of games the
policy played here (against the engine's random agent) as the policy did (the same answers, up to ties between
options both score within 1e-5: ``submission.compare``), deck and rounds included; written into a staging
folder and moved into `<folder>` only once checked;
its move times there (one core) are printed, median and p99, against the environment's limits.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ConfigError
from ..eval.export import export, writer_for  # noqa: F401 - where callers have found them
from .evaluate import _user_errors

USAGE = "usage: tcgexp-export <run dir> <folder> [eval.checkpoint=best|latest|epoch_NNNN] [eval.deck=...]"


def main(argv: list[str] | None = None) -> int:
    from ..learn.blas import setup

    setup()  # nothing here loads MLX; an entry point sets its BLAS up all the same
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0 if args and args[0] in ("-h", "--help") else 2
    with _user_errors():
        run_dir, folder = Path(args[0]), Path(args[1])
        if not run_dir.is_dir():
            raise ConfigError(f"{run_dir} is no folder: {USAGE}")
        for said in export(run_dir, folder, args[2:])[1]:
            print(said)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
