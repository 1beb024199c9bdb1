"""``python -m tcgexp.reference config|metrics``: a generated reference page, in the terminal.

The same Markdown the docs site builds (its Config reference and Metrics reference pages), for a
reader without the site: every knob with its type, default, allowed values and meaning, or every
tracked name with its meaning.
"""

from __future__ import annotations

import argparse

from . import PAGES, page


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tcgexp.reference", description=__doc__.splitlines()[0])
    parser.add_argument("page", choices=sorted(PAGES), help="config: every knob; metrics: every tracked name")
    print(page(parser.parse_args(argv).page))


if __name__ == "__main__":
    main()
