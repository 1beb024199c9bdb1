"""The error every layer raises for a config or input the user must change: named key, what to change.

At the bottom of the house: schemas, data, caches, the trainer and the sweeper raise it; every
entry point prints it as one line (``console.py``). The layers' own errors (``DataError``,
``CheckpointError``, ...) live beside them.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A composed config whose values cannot work together: named key, what to change."""
