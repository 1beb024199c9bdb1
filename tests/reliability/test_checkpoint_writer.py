"""The background checkpoint writer: writes in order, a failure raised on the training thread, bounded waits."""

from __future__ import annotations

import threading
import time

import pytest

from tcgexp.lifecycle.ckpt_writer import CheckpointWriter


def test_writes_keep_their_order_and_drain_waits_for_all():
    done, writer = [], CheckpointWriter(depth=2)
    for i in range(6):
        writer.submit(lambda i=i: (time.sleep(0.01), done.append(i)))
    writer.drain()
    assert done == list(range(6)) and writer.idle


def test_a_failed_write_is_raised_at_the_next_check_and_nothing_newer_is_written():
    done, writer = [], CheckpointWriter()

    def fail():
        raise OSError("disk full")

    writer.submit(fail)
    writer.submit(lambda: done.append("newer"))
    with pytest.raises(OSError, match="disk full"):
        writer.drain()
    with pytest.raises(OSError, match="disk full"):  # at every step boundary from then on
        writer.check()
    with pytest.raises(OSError, match="disk full"):
        writer.submit(lambda: done.append("after"))
    assert done == [], "no write after the failed one: what is kept stays the newest"


def test_a_full_queue_holds_the_caller_and_an_abandoned_wait_leaves_the_write_in_flight():
    release, writer = threading.Event(), CheckpointWriter(depth=1)
    writer.submit(release.wait)  # a write that hangs (a disk that stopped answering)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        writer.submit(lambda: None, abandon=lambda: TimeoutError() if time.monotonic() - t0 > 0.2 else None)
    with pytest.raises(TimeoutError):
        writer.drain(abandon=lambda: TimeoutError())
    assert not writer.idle
    release.set()
    writer.drain()
    assert writer.idle
