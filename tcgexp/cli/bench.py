"""``tcgexp-bench`` / ``python -m tcgexp.bench <name> [options]``; ``--help`` lists the benchmarks."""

from __future__ import annotations

import argparse
import os
import sys

from ..bench import (
    agent,
    corpus,
    distributed,
    imports,
    loader,
    memory,
    play,
    scale,
    scan,
    search,
    sequence,
    sweep,
    train,
)
from ..console import one_line_errors
from ..learn.blas import setup
from ..train.errors import USER_ERRORS

BENCHES = {
    "agent": agent,
    "corpus": corpus,
    "distributed": distributed,
    "import": imports,
    "loader": loader,
    "memory": memory,
    "play": play,
    "scale": scale,
    "scan": scan,
    "search": search,
    "sequence": sequence,
    "sweep": sweep,
    "train": train,
}


def parser() -> argparse.ArgumentParser:
    script = os.path.basename(sys.argv[0])
    p = argparse.ArgumentParser(prog="python -m tcgexp.bench" if script == "__main__.py" else script)
    sub = p.add_subparsers(dest="name", required=True)
    for name, mod in BENCHES.items():
        mod.add_arguments(sub.add_parser(name, help=mod.__doc__.splitlines()[0]))
    return p


@one_line_errors(*USER_ERRORS)
def main(argv: list[str] | None = None) -> None:
    setup()  # MKL before any benchmark loads MLX (which binds its BLAS when it loads)
    args = parser().parse_args(argv)
    BENCHES[args.name].run(args)


if __name__ == "__main__":
    main()
