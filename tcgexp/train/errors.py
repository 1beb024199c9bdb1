"""Errors that are the user's to fix: printed as one line, no traceback."""

from ..data.errors import DataError
from ..errors import ConfigError
from ..learn.blas import BlasError
from ..learn.diverge import DivergenceError
from ..learn.errors import PrecisionError, ScheduleError
from ..lifecycle.ckpt_files import CheckpointError, CheckpointWriteError
from ..lifecycle.errors import DistributedError

USER_ERRORS = (
    ConfigError,
    DataError,
    CheckpointError,
    CheckpointWriteError,
    ScheduleError,
    PrecisionError,
    DivergenceError,
    DistributedError,
    BlasError,
)
