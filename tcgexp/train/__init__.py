"""Training: ``python -m tcgexp.train`` composes a run and calls :func:`train`.

Importing this package does nothing to the process: ``train`` sets up MKL and the BLAS threads when it runs,
before the run's modules (which import MLX) are loaded.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from ..learn.blas import setup


def train(cfg: DictConfig, **kw: Any) -> dict[str, Any]:
    """Train as `cfg` says (``tcgexp.train.run.train``; its keyword arguments pass through)."""
    setup()
    # imported here, after setup(): the run's modules import MLX, which binds its BLAS when it loads
    from .run import train as run_train

    return run_train(cfg, **kw)


__all__ = ["train"]
