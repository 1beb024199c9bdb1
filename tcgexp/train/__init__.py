"""Training entry: ``python -m tcgexp.train`` composes a run and calls :func:`train`."""
from .blas import load_fast_blas

# MLX binds its BLAS when mlx.core is first imported, and .run imports it: load MKL first.
BLAS = load_fast_blas()

from .run import train  # noqa: E402

__all__ = ["train", "BLAS"]
