"""tracking=aim: the sequence is one Aim experiment, each phase a run holding its parent, and the sequence's own
run one series over days, continued by the next day's command (read back with Aim's own SDK)."""

from __future__ import annotations

import json

from tcgexp.track.aim_repo import open_repo
from tests.sequence.test_sequence import DAYS, days, run


def test_the_sequence_is_one_experiment_and_one_series_over_days(tmp_path):
    repo = tmp_path / "aim"
    aim = ["tracking=aim", f"tracking.repo={repo}"]
    run(tmp_path, days(*DAYS[:2]), *aim)
    run(tmp_path, days(*DAYS), *aim)  # the next day: the same series goes on
    state = json.loads((tmp_path / "seq" / "sequence.json").read_text())
    runs = list(open_repo(repo).iter_runs())
    assert {r.experiment for r in runs} == {"sequence seq"}
    own = [r for r in runs if r.hash == state["aim_hash"]]
    assert len(own) == 1 and len(runs) == 1 + len(DAYS), "the sequence's run and one run per phase"
    series = {m.name: list(m.values.values_list()) for m in own[0].metrics() if m.name.startswith("day/")}
    assert series["day/val/loss"] == [p["val"]["loss"] for p in state["phases"]]
    assert len(series["day/val/accuracy"]) == len(DAYS)
    by_hash = {r.hash: r for r in runs}
    for before, p in zip(state["phases"], state["phases"][1:]):
        result = json.loads((tmp_path / "seq" / "phases" / p["day"] / "result.json").read_text())
        lineage = by_hash[result["aim_hash"]]["hparams"]["lineage"]
        assert lineage[-1]["weights_sha256"] == before["canonical_sha256"]
        assert lineage[-1]["run_dir"] == str((tmp_path / "seq" / "phases" / before["day"]).absolute())


def aim_processes_during(work) -> set[int]:
    """The pids of the Aim processes (``tcgexp.track.remote``) this process ran while `work()` ran."""
    import threading

    import psutil

    seen, done = set(), threading.Event()
    me = psutil.Process()

    def aim_children() -> set[int]:
        pids = set()
        for child in me.children(recursive=True):
            try:
                if "tcgexp.track.remote" in " ".join(child.cmdline()):
                    pids.add(child.pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        return pids

    before = aim_children()  # another test's spare, waiting in this process for a sweep's next job: not this one's

    def watch():
        while not done.is_set():
            seen.update(aim_children() - before)
            done.wait(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        work()
    finally:
        done.set()
        t.join()
    return seen


def test_the_phases_share_one_aim_process_and_leave_none(tmp_path):
    """One Aim process, started before the first phase, serves every phase and the series (a run of its own
    would import Aim again each time); it ends with the sequence."""
    import psutil

    from tcgexp.track import aim_run

    repo = tmp_path / "aim"
    shared = aim_processes_during(lambda: run(tmp_path / "a", days(*DAYS), "tracking=aim", f"tracking.repo={repo}"))
    assert len(shared) == 1, shared
    assert not aim_run._SPARE, "the shared process was let go at the sequence's end"
    pid = next(iter(shared))
    try:  # told to end (its stdin closed), it exits holding no run
        assert psutil.Process(pid).wait(timeout=30) == 0
    except psutil.NoSuchProcess:  # gone and reaped already
        pass
    each = aim_processes_during(
        lambda: run(tmp_path / "b", days(*DAYS), "tracking=aim", f"tracking.repo={repo}", "tracking.keep_process=false")
    )
    assert len(each) > 1, "with keep_process=false each phase starts its own"
    assert len(list(open_repo(repo).iter_runs())) == 2 * (len(DAYS) + 1)
