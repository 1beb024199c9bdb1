"""``python -m tcgexp.kernels``: which step path a run would take here, and why; ``build``: build the kernels now."""

from __future__ import annotations

import sys

from ..kernels import load
from ..learn.blas import setup


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["build"]):
        print("usage: python -m tcgexp.kernels [build]", file=sys.stderr)
        return 2

    setup()  # MKL before mlx.core, as a run loads it

    module, line = load(say=print)
    print(f"trainer.kernels=auto runs the {'fused' if module else 'pure MLX'} step: {line}")
    return 0 if module or not argv else 1


if __name__ == "__main__":
    sys.exit(main())
