"""Stopping signals during a run: finish the optimizer step, write latest/, leave, resumable.

SLURM, Kubernetes, ``timeout`` and submitit's preemption send SIGTERM (submitit:
SIGUSR2 to checkpoint and requeue; some SLURM setups ``--signal=USR1``; a
closed terminal SIGHUP); Ctrl-C is SIGINT. Python's defaults end the process
at once (or with a 33-line traceback), losing up to
``checkpoint.latest_every_steps`` steps, the spill dir and the Aim run's
status. For the run's duration ``StopSignals`` replaces them with a handler
that only sets a flag: the run stops at the next point where nothing is
half-done (``check()``, called by the loop after an applied optimizer step and
between validation microbatches), writes ``latest/``, marks its Aim run and
result.json "interrupted", removes its spill and exits 128 + the signal
number, the shell's convention (143 for SIGTERM, 130 for Ctrl-C).

A second stopping signal means "now": the handler raises ``ForcedStop``
from wherever the main thread is, and the run's cleanup (``finally`` blocks,
the ExitStack) still runs on the way out. Once a run of several ranks has
written its outputs (``run_over()``) nothing is left to abandon, and the
SIGTERM that ``mlx.launch`` sends the other ranks when one leaves is only noted; after the run a
launched rank still only notes it (``launch.keep_exit``) while it leaves and writes its exit status.

Why the handler does no I/O: it runs between two bytecodes of the main
thread, which may be halfway through a print or a checkpoint write.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Self

from ..launch import keep_exit
from ..overrides import shell_override

# SIGTERM and SIGINT are always ours for the run; the others only while nobody
# else (submitit's requeue handler, a user's hook) has claimed them.
ALWAYS = ("SIGTERM", "SIGINT")
IF_UNCLAIMED = ("SIGHUP", "SIGUSR1", "SIGUSR2")
# after the first stopping signal, a wait for data longer than this is abandoned (a store that stopped answering
# would hold the run to its bound, ~50 s, past SLURM's KillWait of 30 s): the run leaves with the latest/ it has
STOP_GRACE_S = 8.0
WRITE_IN_FLIGHT = "the checkpoint write in flight"  # what a WaitAbandoned waited for, when not data


class Preempted(Exception):
    """Raised at a safe point after a stopping signal: latest/ is written, the run is resumable."""

    def __init__(self, signame: str) -> None:
        super().__init__(f"stopped by {signame}")
        self.signame = signame

    def __reduce__(self):
        # pickled by its own arguments: a joblib worker's exception crosses to the sweep process (tests/test_exceptions.py)
        return type(self), (self.signame,), self.__dict__


class ForcedStop(BaseException):
    """A second stopping signal: leave at once (BaseException, so no ``except Exception`` swallows it)."""

    def __init__(self, signame: str) -> None:
        super().__init__(f"stopped at once by a second {signame}")
        self.signame = signame

    def __reduce__(self):
        return type(self), (self.signame,), self.__dict__


class WaitAbandoned(ForcedStop):
    """A stopping signal arrived while the run waited for data that did not come within ``STOP_GRACE_S``:
    the run leaves at once with the latest/ it has (as after a second signal)."""

    def __init__(self, signame: str, what: str) -> None:
        super().__init__(signame)
        self.args = (f"stopped by {signame} while waiting {STOP_GRACE_S:.0f} s for {what}",)
        self.what = what

    def __reduce__(self):
        return type(self), (self.signame, self.what), self.__dict__


def stop_line(stop: ForcedStop, run_dir) -> str:
    """The one line of a run that left at once, without a new latest/."""
    if isinstance(stop, WaitAbandoned) and stop.what == WRITE_IN_FLIGHT:
        return (
            f"[train] stopped by {stop.signame}: {stop.what} did not finish within {STOP_GRACE_S:.0f} s of it, "
            f"so the run left without waiting for it; the checkpoints written before it are kept, resume={run_dir} "
            "continues from its latest/"
        )
    if isinstance(stop, WaitAbandoned):
        return (
            f"[train] stopped by {stop.signame}: {stop.what} did not come within {STOP_GRACE_S:.0f} s of it, "
            f"so the run left without finishing its step; its last latest/ is kept, {shell_override('resume', str(run_dir))} "
            "continues from it"
        )
    return (
        f"[train] stopped at once by a second {stop.signame}; spill removed; {shell_override('resume', str(run_dir))} "
        f"continues from its last latest/ (every checkpoint.latest_every_steps)"
    )


class RunInterrupted(SystemExit):
    """How ``train()`` ends after a signal: a SystemExit with code 128 + signum and no traceback.

    ``message`` is the one line already printed; ``result`` the result dict (None after a ForcedStop).
    """

    def __init__(self, code: int, message: str, result: dict | None = None) -> None:
        super().__init__(code)
        self.message, self.result = message, result

    def __reduce__(self):
        # pickled by its own arguments: a joblib worker's exception crosses to the sweep process (tests/test_exceptions.py)
        return type(self), (self.code, self.message, self.result), self.__dict__


def exit_code(signame: str) -> int:
    return 128 + int(getattr(signal, signame))


class StopSignals:
    """Context manager: stopping signals set ``requested`` (the first) or raise ForcedStop (the next).

    Installed only from the main thread (Python allows handlers nowhere else; a run started
    from another thread keeps the process's handlers). The previous handlers are restored on exit.
    """

    def __init__(self) -> None:
        self.requested: str | None = None  # the first signal's name
        # with several ranks: the signal another rank received, which this one stops for too. Not a
        # signal of ours: the one mlx.launch sends when that rank exits must not count as a second
        self.agreed: str | None = None
        self.over = False  # set by ``run_over()``: nothing is left to abandon
        self.requested_at: float | None = None  # monotonic time of the first signal
        self.forced = False  # a second signal: every wait ends now
        self._previous: dict[int, object] = {}

    active: StopSignals | None = None  # the run's, while installed (signal handlers are per process)

    def __enter__(self) -> Self:
        if threading.current_thread() is not threading.main_thread():
            return self
        StopSignals.active = self
        for name in ALWAYS + IF_UNCLAIMED:
            signum = getattr(signal, name, None)
            if signum is None:  # not on this platform
                continue
            current = signal.getsignal(signum)
            if name in IF_UNCLAIMED and current not in (signal.SIG_DFL, None):
                continue  # someone else's (submitit requeues on SIGUSR2), or ignored on purpose (nohup)
            self._previous[signum] = current
            signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if StopSignals.active is self:
            StopSignals.active = None
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        if self._previous:
            keep_exit()  # the run is over: a launched rank's exit status is still to be written
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None and not self.over:
            self.forced = True
            raise ForcedStop(name)
        if self.requested is None:
            self.requested, self.requested_at = name, time.monotonic()

    def request(self, name: str) -> None:
        """Stop as if `name` had arrived, unless a stop is already requested (then nothing more: this is
        no second signal). For what is not a signal to this process: its launcher's death."""
        if self.requested is None:
            self.requested, self.requested_at = name, time.monotonic()

    def run_over(self) -> None:
        """The run's outputs are written and every rank is past them: a later signal forces nothing.

        With several ranks, when one rank leaves with 143 (a signal) mlx.launch SIGTERMs the others:
        on a rank that was signalled too (SLURM signals every task) that is a second signal, which
        must not cut its last tidying (spill removal, the final line) short.
        """
        self.over = True

    def overdue(self, grace_s: float = STOP_GRACE_S) -> bool:
        """Whether a wait must end now: a second signal came, or the first is older than `grace_s`."""
        return self.forced or (self.requested_at is not None and time.monotonic() - self.requested_at >= grace_s)

    @property
    def name(self) -> str | None:
        """What the run stopped for: this process's own signal, else the one the ranks agreed on."""
        return self.requested or self.agreed

    def check(self) -> None:
        """At a safe point: raise Preempted when a stopping signal has arrived."""
        if self.requested is not None:
            raise Preempted(self.requested)
