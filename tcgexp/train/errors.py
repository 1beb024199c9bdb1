"""Errors that are the user's to fix: printed as one line, no traceback."""

from ..data.errors import DataError
from ..errors import ConfigError
from .checkpoint import CheckpointError, CheckpointWriteError
from .distributed import DistributedError
from .diverge import DivergenceError
from .schedule import ScheduleError
from .step import PrecisionError

USER_ERRORS = (
    ConfigError,
    DataError,
    CheckpointError,
    CheckpointWriteError,
    ScheduleError,
    PrecisionError,
    DivergenceError,
    DistributedError,
)
