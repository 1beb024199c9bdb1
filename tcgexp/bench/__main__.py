"""``python -m tcgexp.bench <name> [options]``; ``--help`` lists the benchmarks."""
from __future__ import annotations

import argparse

from . import corpus, loader, scale, scan, train

BENCHES = {"corpus": corpus, "loader": loader, "scale": scale, "scan": scan, "train": train}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tcgexp.bench")
    sub = parser.add_subparsers(dest="name", required=True)
    for name, mod in BENCHES.items():
        mod.add_arguments(sub.add_parser(name, help=mod.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    BENCHES[args.name].run(args)


if __name__ == "__main__":
    main()
