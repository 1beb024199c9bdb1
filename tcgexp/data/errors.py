"""One error type for bad data, always naming what is wrong and where; lists in it stay short."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

MAX_WHAT = 2000  # characters of the message's own text: a line for a person, whatever the input


def listed(items: Sequence, limit: int = 5, sep: str = ", ") -> str:
    """The first `limit` items and how many more: 'a, b, c, d, e and 3,647,055 more' (never the whole list)."""
    items = list(items)
    shown = sep.join(str(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit:,} more" if len(items) > limit else "")


class DataError(ValueError):
    """Bad or inconsistent corpus data.

    The message names the file (and row group or lane when known) and says
    what to do about it; the attributes carry the same facts for callers.
    """

    def __init__(
        self,
        what: str,
        *,
        path: Path | str | object | None = None,  # a Path, or a URI (anything whose str has '://')
        row_group: int | None = None,
        lane: tuple[int, int] | None = None,
        fix: str | None = None,
    ) -> None:
        # an object-store URI stays a string: Path() would fold its "//"
        remote = path is not None and "://" in str(path)
        self.path = str(path) if remote else Path(path) if path is not None else None
        self.row_group = row_group
        self.lane = lane
        where = []
        if path is not None:
            where.append(str(path))
        if row_group is not None:
            where.append(f"row group {row_group}")
        if lane is not None:
            where.append(f"lane (episode_id={lane[0]}, side={lane[1]})")
        if len(what) > MAX_WHAT:  # a bound on every line, should a caller list too much
            what = what[:MAX_WHAT] + f" ... ({len(what) - MAX_WHAT:,} characters more)"
        msg = (", ".join(where) + ": " if where else "") + what
        if fix:
            msg += f" -- {fix}"
        super().__init__(msg)


class BuildRefused(DataError):
    """A build step that would lose or silently replace something already built."""


class StoreInterrupted(SystemExit):
    """A stopping signal (Ctrl-C, SIGTERM, SIGHUP) while waiting on an object store.

    The store's requests are abandoned (its client process killed) and the process leaves with
    128 + the signal number, the shell's convention, after the one line in ``message`` (already
    printed). A SystemExit, as ``tcgexp.train``'s own interruption is: no traceback, no handler
    of ``Exception`` swallows it.
    """

    def __init__(self, signame: str, message: str) -> None:
        import signal

        super().__init__(128 + int(getattr(signal, signame)))
        self.signame, self.message = signame, message

    def __reduce__(self):
        # pickled by its own arguments: a joblib worker's exception crosses to the sweep process (tests/test_exceptions.py)
        return type(self), (self.signame, self.message), self.__dict__
