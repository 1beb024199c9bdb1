"""The lifecycle's errors that are the user's to fix, apart from the code that raises them (``distributed.py``
imports MLX; the entry points name these before tcgexp's BLAS set-up lets anything import MLX)."""


class DistributedError(RuntimeError):
    """The ranks can no longer train together: printed as one line, the run exits non-zero."""
