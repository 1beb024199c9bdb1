"""Every exception tcgexp raises survives pickling with its type, message and attributes.

A job run by joblib's workers (``hydra/launcher=joblib``) hands its exception back to the sweep
process pickled. Python pickles an exception by ``type(e)(*e.args)``; a class whose ``__init__``
takes other arguments than its message fails to unpickle, and loky then reports a broken pool with
a traceback instead of the job's own ending (a Ctrl-C'd grid sweep ended with exit 1 and
``RunInterrupted.__init__() missing 1 required positional argument: 'message'``). ``SAMPLES`` holds
one instance of every class that defines its own ``__init__``; a class the package adds without a
sample fails ``test_every_exception_with_its_own_init_has_a_sample``.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import tcgexp
from tcgexp.data.build_stop import BuildStopped
from tcgexp.data.errors import DataError, StoreInterrupted
from tcgexp.data.storeproc import Interrupted
from tcgexp.extras import NEEDS
from tcgexp.lifecycle.signals import ForcedStop, Preempted, RunInterrupted, WaitAbandoned

SAMPLES = {
    DataError: DataError(
        "no such column", path="/data/day=2026-07-27/part-0.parquet", row_group=3, lane=(17, 1), fix="rebuild the day"
    ),
    StoreInterrupted: StoreInterrupted("SIGINT", "[data] interrupted by SIGINT while reading s3://bucket/day"),
    Interrupted: Interrupted("SIGTERM"),
    BuildStopped: BuildStopped("SIGTERM"),
    Preempted: Preempted("SIGTERM"),
    ForcedStop: ForcedStop("SIGINT"),
    WaitAbandoned: WaitAbandoned("SIGINT", "row group 4 of day 2026-07-27"),
    RunInterrupted: RunInterrupted(
        130, "[train] interrupted by SIGINT after optimizer step 1", {"status": "interrupted", "signal": "SIGINT"}
    ),
}


def own_init_exceptions() -> list[type]:
    found = []
    for mod in pkgutil.walk_packages(tcgexp.__path__, "tcgexp."):
        if mod.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(mod.name)
        except ImportError:
            if mod.name in NEEDS:
                continue  # its extra is not installed here (tests/test_extras.py holds the table to the walk)
            raise
        found += [
            c
            for c in vars(module).values()
            if inspect.isclass(c)
            and issubclass(c, BaseException)
            and c.__module__ == mod.name
            and "__init__" in c.__dict__
        ]
    return found


def test_every_exception_with_its_own_init_has_a_sample():
    missing = [f"{c.__module__}.{c.__qualname__}" for c in own_init_exceptions() if c not in SAMPLES]
    assert not missing, f"add a sample of each to SAMPLES: {missing}"


@pytest.mark.parametrize("exc", list(SAMPLES.values()), ids=[c.__name__ for c in SAMPLES])
def test_an_exception_survives_pickling(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc) and back.args == exc.args
    assert vars(back) == vars(exc)
    if isinstance(exc, SystemExit):
        assert back.code == exc.code
