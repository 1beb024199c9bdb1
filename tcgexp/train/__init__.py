"""Training entry: ``python -m tcgexp.train`` composes a run and calls :func:`train`."""

from ..launch import share_cores
from .blas import load_fast_blas

share_cores()  # ranks of one mlx.launch on one host: each its share of the cores' BLAS threads
# MLX binds its BLAS when mlx.core is first imported, and .run imports it: load MKL first.
BLAS = load_fast_blas()

from .run import train

__all__ = ["BLAS", "train"]
