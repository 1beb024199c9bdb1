"""Every wait on a study database bounded, and every failure of one said as what it is.

Why: a MySQL server that accepts and never answers held a sweep silent for 9 min 43 s (PyMySQL
reads the server's greeting with no timeout unless it is given one), and a damaged ``optuna.db``
was answered with advice about servers and passwords. Now each driver gets its own connect and read
bounds (``connect_args``), every call the sweeper makes to the study runs under a deadline whatever
the driver does (``deadline``: a frozen server process, which its kernel keeps acknowledging, a
journal file on a hung network file system), and ``failure`` names the cause: a damaged or locked
SQLite file, a read-only folder, a server out of reach.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import ConfigError
from ..track.aim_repo import one_line

CONNECT_TIMEOUT_S = 10  # a database server that does not answer fails the sweep in seconds, not minutes
READ_TIMEOUT_S = 30  # a server that stops answering mid-sweep (PyMySQL's read/write, PostgreSQL's statements)
SQLITE_BUSY_S = 30  # another process's write transaction on the sweep's own SQLite file
CALL_BOUND_S = 90  # one call to the study, its retries and every round trip in it, whatever the driver does
T = TypeVar("T")


class StudyUnanswered(ConfigError):
    """A call to the study database ran past its bound (one line at every entry point)."""


def dialect(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]


def connect_args(url: str) -> dict[str, Any]:
    """The driver's own connect and read bounds for `url` (SQLAlchemy's ``connect_args``)."""
    kind = dialect(url)
    if kind == "sqlite":
        return {"timeout": SQLITE_BUSY_S}
    if kind in ("mysql", "mariadb"):  # PyMySQL: the greeting and every reply are reads
        return {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S, "write_timeout": READ_TIMEOUT_S}
    if kind == "postgresql":  # libpq: connect_timeout covers the start-up exchange; the rest the server's own
        return {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": f"-c statement_timeout={READ_TIMEOUT_S * 1000}",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "tcp_user_timeout": READ_TIMEOUT_S * 1000,
        }
    return {"connect_timeout": CONNECT_TIMEOUT_S}


@contextlib.contextmanager
def deadline(seconds: float, key: str, what: str = "a call") -> Iterator[None]:
    """Raise StudyUnanswered if the block runs past `seconds` (SIGALRM: the main thread only; a call from
    another thread, or inside another deadline, runs under the outer bound or its driver's own)."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return

    def expired(signum, frame) -> None:
        raise StudyUnanswered(
            f"{key}: the study database did not answer {what} within {seconds:.0f} s (a server "
            "that stopped answering, or a file system that hangs): check it and run the same "
            "command again; every trial keeps its latest/"
        )

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def failure(url: str, key: str, exc: BaseException, doing: str = "cannot open the study database") -> ConfigError:
    """One line naming what is wrong with the study database, and the fix that fits it."""

    exc = getattr(exc, "orig", None) or exc  # the driver's own error, without SQLAlchemy's statement and link
    text = one_line(exc)
    low = text.lower()
    said = f"{key}: {doing} ({type(exc).__name__}: {text})"
    if dialect(url) == "sqlite":
        path = url.split(":///", 1)[-1]
        if "not a database" in low or "malformed" in low or "file is encrypted" in low:
            return ConfigError(
                f"{key}: {path} is damaged ({text}): it is not an SQLite database tcgexp can read; "
                "restore it from a copy, or run the sweep in a new hydra.sweep.dir (this folder's "
                "trial folders belong to the damaged study; each keeps its result.json and "
                "checkpoints)"
            )
        if "locked" in low or "busy" in low:
            return ConfigError(
                f"{said}: another process held it for {SQLITE_BUSY_S} s; is another sweep writing "
                "it? wait for it, or give this sweep another hydra.sweep.dir"
            )
        if "readonly" in low or "read-only" in low or "unable to open" in low or "permission" in low:
            return ConfigError(
                f"{said}: its folder cannot be written (read-only, or not yours); point "
                "hydra.sweep.dir at a folder you can write"
            )
        return ConfigError(f"{said}; leave hydra.sweeper.storage unset for the sweep dir's own SQLite file")
    return ConfigError(
        f"{said}; check that the server is up and the URL, user and password are right, or leave "
        "hydra.sweeper.storage unset for the sweep dir's own SQLite file"
    )


def bounded(url: str, key: str, call: Callable[[], T], doing: str = "cannot open the study database") -> T:
    """`call` under the deadline, any failure one line (``failure``)."""
    try:
        with deadline(CALL_BOUND_S, key):
            return call()
    except (ConfigError, ImportError):  # ours already; a driver not installed (said by open_storage)
        raise
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's, the driver's, Optuna's own
        raise failure(url, key, exc, doing) from None


def bounded_storage(storage, url: str, key: str):
    """`storage` with every method under the deadline (Optuna calls it from ask, tell, set_user_attr...);
    ``.url`` and ``.key`` say where it is."""
    from optuna.storages import BaseStorage

    def forward(name: str):
        def method(self, *args, **kwargs):
            with deadline(CALL_BOUND_S, key, f"to {name}"):
                return getattr(self._inner, name)(*args, **kwargs)

        method.__name__ = name
        return method

    names = [n for n in dir(BaseStorage) if not n.startswith("_") and callable(getattr(BaseStorage, n))]
    cls = type("BoundedStorage", (BaseStorage,), {n: forward(n) for n in names})
    wrapped = cls.__new__(cls)
    wrapped._inner, wrapped.url, wrapped.key = storage, url, key
    return wrapped
