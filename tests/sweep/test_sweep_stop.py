"""How the halving sweep's launch ends when the sweep is signalled, whatever the launcher hands back.

joblib answers a Ctrl-C to the process group in one of two ways, by a race between its workers and the
pool: a broken pool (an exception) or the worker's own KeyboardInterrupt returned as the job's result and
re-raised in the sweep. Both must end the sweep with 128 + the signal and the line that says how to
continue (CI saw the second end the process by SIGINT, exit -2). The real joblib sweep is
``test_sweeps.py::test_ctrl_c_stops_a_joblib_sweep_and_the_same_command_continues_it``; this pins each
answer deterministically with a launcher that gives exactly it.
"""

from __future__ import annotations

import signal

import pytest

from tcgexp.sweep.sweeper import HalvingSearch


class Answers:
    """A launcher whose batch is stopped by `signals` (sent to this process) and then ends with `outcome`."""

    def __init__(self, signals: list[signal.Signals], outcome: BaseException | None) -> None:
        self.signals, self.outcome = signals, outcome

    def launch(self, jobs, initial_job_idx):
        for s in self.signals:
            signal.raise_signal(s)
        if self.outcome is not None:
            raise self.outcome
        return [None] * len(jobs)


def search_with(launcher, tmp_path) -> HalvingSearch:
    search = HalvingSearch.__new__(HalvingSearch)  # launch() needs only these; the rest is Hydra's plumbing
    search.launcher, search.job_idx, search.sweep_dir = launcher, 0, tmp_path
    return search


@pytest.mark.parametrize(
    "signals, outcome, code",
    [
        ([signal.SIGINT], KeyboardInterrupt(), 130),
        ([signal.SIGINT], RuntimeError("pool broken"), 130),
        ([signal.SIGINT], None, 130),
        ([signal.SIGTERM], KeyboardInterrupt(), 143),
        ([signal.SIGTERM], OSError("worker died"), 143),
        ([signal.SIGINT, signal.SIGINT], None, 130),
    ],
    ids=[
        "worker-keyboardinterrupt",
        "broken-pool",
        "batch-finished",
        "sigterm-worker-keyboardinterrupt",
        "sigterm-broken-pool",
        "second-ctrl-c",
    ],
)
def test_a_signalled_batch_ends_the_sweep_with_128_plus_the_signal(tmp_path, capsys, signals, outcome, code):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        search_with(Answers(signals, outcome), tmp_path).launch([["a=1"], ["a=2"]])
    assert stopped.value.code == code
    assert "run the same command to continue the study" in capsys.readouterr().err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # handlers given back


def test_an_error_without_a_signal_is_the_launchers_error(tmp_path):
    with pytest.raises(RuntimeError, match="pool broken"):
        search_with(Answers([], RuntimeError("pool broken")), tmp_path).launch([["a=1"]])


def test_a_keyboardinterrupt_without_a_signal_here_is_not_turned_into_an_exit(tmp_path):
    """A job in this process (the basic launcher) holds the signals itself; what it raises goes up as is."""
    with pytest.raises(KeyboardInterrupt):
        search_with(Answers([], KeyboardInterrupt()), tmp_path).launch([["a=1"]])
