"""The learning side's errors that are the user's to fix, said in one line by every entry point.

Apart from the code that raises them (``step.py``, ``schedule.py``) because the entry points name them before
any of that code is imported: those modules import MLX, which must wait for tcgexp's BLAS set-up
(``blas.py``). ``DivergenceError`` lives with its guard (``diverge.py``), which imports no MLX either.
"""


class PrecisionError(TypeError):
    """A parameter, gradient or moment that is not float32 (the trainer is strict FP32)."""


class ScheduleError(ValueError):
    """A schedule that cannot run as asked (a resumed run past its checkpoint's horizon)."""
