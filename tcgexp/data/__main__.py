"""``python -m tcgexp.data``: the command ``tcgexp/cli/data.py`` is, under the name users type. Every command's
body lives in ``tcgexp/cli/``, above the library; this alias runs it by name (``runpy``) rather than importing
it, so that the library package below names nothing above it."""

import runpy

runpy.run_module("tcgexp.cli.data", run_name="__main__", alter_sys=True)
