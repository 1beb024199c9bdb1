"""Training entry: ``python -m tcgexp.train`` composes a run and calls :func:`train`."""
from .run import train

__all__ = ["train"]
