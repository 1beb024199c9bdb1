"""What a command says to its user when something is the user's to fix: one line, ``error: ...``.

Every entry point's ``main`` is wrapped in :func:`one_line_errors`: a user's
error (a bad override, a missing config, a value no schema allows, a damaged
file) is one line naming the key or file; a bug keeps its traceback.
``--verbose``, ``TCGEXP_VERBOSE=1`` or ``HYDRA_FULL_ERROR=1`` show the
traceback of a user's error too. Inside a Hydra task, :func:`job_errors` does
the same for a run, and for a sweep's job says the line and lets Hydra record
the job as failed. :func:`say_now` is for a process that may not live to the
top of its stack (a launched rank the launcher is about to stop).

At the bottom of the house with ``errors.py``: the trainer, the sweeper and
the entry points all speak through it; it imports nothing of tcgexp above it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .launch import keep_exit
from .plugins import missing_plugin_hint

VERBOSE_FLAG = "--verbose"
NOISE = ("reference_type=", "object_type=", "Config search path", "provider=", "Set the environment variable")
HINTS = (", set env var HYDRA_FULL_ERROR=1 to see chained exception.", "")  # --verbose says it for every app


def verbose() -> bool:
    """Whether the user asked for tracebacks: ``TCGEXP_VERBOSE=1`` (set by ``--verbose`` and, at the
    entry point, by the user's ``HYDRA_FULL_ERROR=1``; the wrapper sets the latter for itself)."""
    return os.environ.get("TCGEXP_VERBOSE", "") not in ("", "0")


def flatten(text: str) -> str:
    """A multi-line message (Hydra's, OmegaConf's) as one line, its type and search-path noise left out."""
    lines = []
    for line in str(text).splitlines():
        line = line.strip()
        if line.startswith(NOISE[2:4]):
            break  # MissingConfigException: the search path follows the options; the options suffice
        if line and not line.startswith(NOISE):
            lines.append(line.replace(*HINTS))
    return " ".join(lines)


MLX_LOAD_FAILED = "Could not load C++ shared library "


def mlx_cache_damage(exc: BaseException) -> str | None:
    """The line for a kernel in MLX's own cache of compiled CPU kernels that cannot be loaded, or None.

    MLX compiles each fused graph into ``$TMPDIR/mlx/<version>/cpu/lib*.so`` once and loads it from
    there ever after; a process killed while it compiled one (SIGKILL, the OOM killer) leaves a
    truncated file that every later run fails to load, with no hint of what to delete.
    """
    text = str(exc)
    if not isinstance(exc, RuntimeError) or not text.startswith(MLX_LOAD_FAILED):
        return None
    path, _, why = text[len(MLX_LOAD_FAILED) :].partition(": ")
    return (
        f"MLX could not load its compiled kernel {path} ({why or 'unreadable'}): a file in MLX's kernel cache "
        f"is damaged (a process killed while MLX compiled it); delete {Path(path).parent} (MLX compiles "
        "again what it needs) and run again"
    )


def user_error(exc: BaseException, user_errors: tuple[type, ...] = ()) -> str | None:
    """The one line for `exc` if it is the user's to fix (config, input files), None for a bug."""
    from hydra.errors import HydraException, InstantiationException
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    if isinstance(exc, (ConfigError, *user_errors)):
        return flatten(exc)
    damaged = mlx_cache_damage(exc)
    if damaged:
        return damaged
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, InstantiationException):  # our ValueError/ConfigError (or a bad _target_) inside
        if cause is None or isinstance(
            cause,
            (ValueError, TypeError, ImportError, AttributeError, LookupError, OmegaConfBaseException, *user_errors),
        ):
            return flatten(exc)
        return None
    if isinstance(exc, HydraException):  # composition: unknown key or option, wrong type, bad override
        misspelt = nearest_key(exc)
        if misspelt:
            return misspelt
        more = flatten(cause) if isinstance(cause, OmegaConfBaseException) else ""
        hint = missing_plugin_hint(str(exc))  # a launcher or sweeper plugin that is not installed
        return " ".join(part for part in (hint and f"{hint}.", flatten(exc), more) if part)
    if isinstance(exc, MissingMandatoryValue):  # a group left without an option, an option missing its _target_
        return f"{flatten(exc)} (set it, or pick a group option that sets it: --help lists them)"
    if isinstance(exc, OmegaConfBaseException):
        return flatten(exc)
    return None


def nearest_key(exc: BaseException) -> str | None:
    """Hydra's "Could not override '<key>'. To append to your config use +<key>=<value>" as the line a
    user needs: the key is not in the config, and the nearest one that is. Following Hydra's advice adds a
    key nothing reads (refused in turn, ``schema.unknown_key``), so it is not repeated. None for another error."""
    import difflib
    import re

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = exc.__cause__ or exc.__context__
    typed = re.match(r"Could not override '([^']+)'", str(exc))
    missing = getattr(cause, "full_key", None)
    parent = getattr(cause, "parent_node", None)
    if not typed or not isinstance(cause, (ConfigAttributeError, ConfigKeyError)) or not missing or parent is None:
        return None
    key = typed.group(1).lstrip("+~")
    if not key.startswith(missing):
        return None
    where, _, name = missing.rpartition(".")
    known = [str(k) for k in parent if where or str(k) != "hydra"]
    near = difflib.get_close_matches(name, known, n=1)
    if near:
        fixed = ".".join(p for p in (where, near[0]) if p) + key[len(missing) :]
        return f"{key}: no such key in the config; did you mean {fixed}? ({where or 'the top level'} has: {', '.join(known)})"
    return f"{key}: no such key in the config ({where or 'the top level'} has: {', '.join(known)})"


def say_now(exc: BaseException) -> None:
    """Print `exc`'s one line at once and mark it said: the entry points then exit 1 without repeating it.

    For a failure whose process may not live to the top of the stack: when one rank of an
    ``mlx.launch`` run dies, the launcher SIGTERMs the others, and a SIGTERM that lands after the
    run's own handlers are gone (in Hydra's teardown) ends the process before the usual line.
    """
    print(f"error: {flatten(exc)}", file=sys.stderr, flush=True)
    exc.tcgexp_said = True
    keep_exit()  # said: a launched rank now leaves with its own exit status, whatever the launcher sends


def said(exc: BaseException) -> bool:
    return bool(getattr(exc, "tcgexp_said", False))


INTERRUPTED = (
    "interrupted by SIGINT (Ctrl-C); a run or sweep job that had started keeps the latest/ it had "
    "written: resume=<its run dir> continues it (a halving sweep: the same command)"
)


PACKAGE = str(Path(__file__).resolve().parent)
_DEFAULT_FORMAT = warnings.formatwarning


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning tcgexp raised (a spill turned off, a folder left as it is) as one line, ``warning: ...``; any
    other package's as Python shows it."""
    if str(Path(filename).resolve()).startswith(PACKAGE):
        return f"warning: {message}\n"
    return _DEFAULT_FORMAT(message, category, filename, lineno, line)


def one_line_errors(*user_errors: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate an entry point's ``main`` (above ``@hydra.main``): user errors exit with one line.

    Hydra prints a composition error in several lines and any other error as a
    traceback, then exits; with ``HYDRA_FULL_ERROR=1`` it raises instead, which
    lets this wrapper decide. `user_errors` are the app's own (``DataError``, ...);
    ``ConfigError`` and Hydra's and OmegaConf's errors always are.
    """

    def decorate(main: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(main)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if VERBOSE_FLAG in sys.argv[1:]:
                sys.argv.remove(VERBOSE_FLAG)
                os.environ["TCGEXP_VERBOSE"] = "1"  # jobs and children see it too
            if args and isinstance(args[0], list) and VERBOSE_FLAG in args[0]:  # argparse mains: main(argv)
                args = ([a for a in args[0] if a != VERBOSE_FLAG], *args[1:])
                os.environ["TCGEXP_VERBOSE"] = "1"
            if os.environ.get("HYDRA_FULL_ERROR", "") not in ("", "0"):
                os.environ["TCGEXP_VERBOSE"] = "1"
            if verbose():
                os.environ["HYDRA_FULL_ERROR"] = "1"
                return main(*args, **kwargs)
            shown = warnings.formatwarning
            warnings.formatwarning = one_line_warning  # tcgexp's own warnings as one line each, no source line
            before = os.environ.get("HYDRA_FULL_ERROR")
            os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises, so the error comes here whole
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                # a Ctrl-C no run was holding: before a run's own handlers (composition, set-up), or in a
                # sweep whose jobs run in other processes (joblib, submitit), which stop by themselves
                print(INTERRUPTED, file=sys.stderr, flush=True)
                raise SystemExit(130) from None
            except Exception as exc:  # sorted below: the user's error, or a bug
                line = user_error(exc, user_errors)
                if line is None:
                    raise
                if said(exc):
                    raise SystemExit(1) from None
                report = getattr(exc, "tcgexp_sweep_report", None)  # set by job_errors in the failed job
                where = f"a sweep job failed (every job's error: {report}): " if report else ""
                raise SystemExit(f"error: {where}{line}") from None
            finally:
                warnings.formatwarning = shown
                if before is None:
                    os.environ.pop("HYDRA_FULL_ERROR", None)
                else:
                    os.environ["HYDRA_FULL_ERROR"] = before

        return wrapper

    return decorate


@contextlib.contextmanager
def job_errors(*user_errors: type) -> Iterator[None]:
    """Around a Hydra task's body: a user's error ends a run with one line (before Hydra adds its
    "Error executing job" line); in a sweep the job says the line on stderr and in its log, then
    re-raises, so Hydra records the job as failed and the sweep goes on."""
    try:
        yield
    except Exception as exc:
        line = user_error(exc, user_errors)
        if line is None or verbose():
            raise
        if not in_multirun():
            raise SystemExit(1 if said(exc) else f"error: {line}") from None
        import logging

        if not said(exc):
            print(f"error: {line}", file=sys.stderr, flush=True)
        logging.getLogger("tcgexp.report").error("error: %s", line)  # the job log (train.log)
        exc.tcgexp_sweep_report = str(sweep_dir() / "summary.md")  # travels with the exception (pickled too)
        raise


def sweep_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().sweep.dir)


def in_multirun() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:  # not inside a Hydra job
        return False
