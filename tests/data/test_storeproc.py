"""The main thread's bounded, interruptible wait on a store call (tcgexp.data.storeproc.wait)."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import Future

import pytest

from tcgexp.data import storeproc


@pytest.fixture
def sighup_seen():
    """SIGHUP's handler before the wait (a run's stop handler, say): records what reaches it."""
    got: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda n, _f: got.append(n))
    yield got
    signal.signal(signal.SIGHUP, before)


def test_a_signal_during_the_wait_ends_it_at_once(sighup_seen):
    future: Future = Future()
    threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGHUP)).start()
    with pytest.raises(storeproc.Interrupted, match="SIGHUP"):
        storeproc.wait(future, 30)
    assert sighup_seen == [], "the wait took it, and said so"
    assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL, "the handler before is back"


def test_a_signal_that_comes_with_the_answer_is_not_lost(sighup_seen):
    """The signal and the call's answer in the same poll: the answer is returned and the signal reaches the
    handler that was there before the wait (CI once lost a Ctrl-C this way: the next wait started afresh)."""
    future: Future = Future()

    def answer() -> None:
        os.kill(os.getpid(), signal.SIGHUP)
        future.set_result(7)

    threading.Timer(0.05, answer).start()
    assert storeproc.wait(future, 30) == 7
    assert sighup_seen == [signal.SIGHUP]


def test_the_bound_holds(sighup_seen):
    with pytest.raises(storeproc.TimedOut):
        storeproc.wait(Future(), 0.3)
