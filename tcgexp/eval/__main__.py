"""``python -m tcgexp.eval``: the command ``tcgexp/cli/evaluate.py`` is (``tcgexp-eval``), run by name (``runpy``) so
that the library package below names nothing above it."""

import runpy

runpy.run_module("tcgexp.cli.evaluate", run_name="__main__", alter_sys=True)
