"""The docs site's references, generated from the code when the site is built (``docs/hooks.py``).

``pages()`` is every generated page by its path under docs/; ``python -m tcgexp.reference config``
(or ``metrics``) prints one in a terminal, which is where ``tcgexp-train --help`` points.
"""

from __future__ import annotations

from .config_page import page as config_page
from .metrics_page import page as metrics_page

PAGES = {"config": "config-reference.md", "metrics": "metrics-reference.md"}  # name -> its path under docs/


def page(name: str) -> str:
    """One generated page's Markdown: ``config`` or ``metrics``."""
    if name == "config":
        return config_page()
    if name == "metrics":
        return metrics_page()
    raise ValueError(f"no generated page {name!r}: one of {', '.join(PAGES)}")


def pages() -> dict[str, str]:
    """{path under docs/: Markdown} of every generated page."""
    return {path: page(name) for name, path in PAGES.items()}
