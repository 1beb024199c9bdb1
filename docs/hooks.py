"""MkDocs hook: the generated reference pages (``tcgexp.reference.pages()``) join the site's files.

Built from the checkout this file sits in, so ``mkdocs build`` documents the code beside it, installed
or not.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])


def on_files(files, config):
    from mkdocs.structure.files import File

    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tcgexp.reference import pages

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
