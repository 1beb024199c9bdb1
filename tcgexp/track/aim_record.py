"""A job's Aim run apart from its tracking: where the run folder records it (``RUN_RECORD``), opening or
continuing it under its name and experiment (``open_run``), its attributes, and marking or tracking into it after
the job (a sweep's outcome, ``tcgexp-eval``'s win rates)."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..ownership import held_by_someone
from .aim_repo import exit_cleanup_in_place, one_line, quiet_aim, within
from .context import JobContext

OPEN_SECONDS = 30.0  # the longest anything waits for the run to open (import, repo lock, remote handshake)
RUN_RECORD = ".tcgexp-aim-run.json"
RECORD_LOCK = ".tcgexp-aim-run.lock"  # held by the run's process for its life: a resume waits for it to finish


CLOSE_SECONDS = 10.0  # the longest a job waits for its run to close (a flush to local disk)
SUBSETS = (
    ("train/", "train"),
    ("cache_train/", "train"),
    ("lr", "train"),
    ("val/", "val"),
    ("cache_val/", "val"),
    ("eval/", "eval"),  # the policy playing the real game (tcgexp.eval.evaluate)
)


def subset_of(name: str) -> str | None:
    """The Aim context subset of a metric name: "train", "val", or None (no context)."""
    for prefix, subset in SUBSETS:
        if name == prefix or (prefix.endswith("/") and name.startswith(prefix)):
            return subset
    return None


def by_context(values: dict[str, float], extra: dict | None = None) -> list[tuple[dict, dict[str, float]]]:
    """`values` split into (context, values) groups: one Aim ``track`` call each. `extra` joins every
    group's context (``{"rank": r}``: one rank's own counters in a distributed run)."""
    groups: dict[str | None, dict[str, float]] = {}
    for name, value in values.items():
        groups.setdefault(subset_of(name), {})[name] = float(value)
    return [({**({"subset": subset} if subset else {}), **(extra or {})}, group) for subset, group in groups.items()]


def run_record(context: JobContext) -> str | None:
    """Where the job's tracker records its run (None outside a run folder)."""
    return str(Path(context.run_dir) / RUN_RECORD) if context.run_dir else None


def recorded_run(run_dir: Path, wait: float = 0.0) -> str | None:
    """The hash of the Aim run a job in `run_dir` wrote (its record), or None. `wait`: while that run's process
    still lives (a job SIGKILLed as its tracker started: the process opens the run and writes what it was
    sent), wait for it to end, at most `wait` seconds, so a resume continues that run and never races it."""

    deadline = time.monotonic() + wait
    while held_by_someone(Path(run_dir) / RECORD_LOCK) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        return json.loads((Path(run_dir) / RUN_RECORD).read_text()).get("hash")
    except (OSError, ValueError, AttributeError):
        return None


def run_attributes(hparams: dict, context: JobContext) -> dict[str, Any]:
    """What a job's Aim run records beside its metrics: its name, config, overrides, sweep membership."""
    attrs: dict[str, Any] = {
        "name": context.name,
        "hparams": hparams,
        "overrides": list(context.overrides),
        "swept": context.swept,
        "status": "running",
        "error": None,
    }
    if context.in_sweep:
        attrs["sweep"] = {"id": context.sweep_id, "dir": context.sweep_dir}
        attrs["job_num"] = context.job_num
    return attrs


IDENTITY = ("name", "overrides", "swept", "sweep", "job_num")  # what a resumed job's run keeps as it was


def open_run(aim, *, run_hash: str | None, repo: str, experiment: str, attrs: dict[str, Any]):
    """A new Aim run in `experiment` with `attrs`; or, given `run_hash`, the run a resumed job continues.

    A resumed job is the same run: its name, overrides, sweep and experiment stay as its first job
    set them (the resume's own command line, ``resume=<dir>`` and little else, would rename it
    "defaults" and move it to an experiment named after the new run dir). What runs now (hparams)
    and the status are updated, and the resume's overrides are appended to ``run["resumes"]``.
    """
    # capture_terminal_logs off: the run lives in a child process (remote.py) whose stdout is the pipe
    # to its job, protocol lines and no logs
    exit_cleanup_in_place()  # a repo on a server was not prepared here (prepare_repo sees to it for a local one)
    if run_hash is None:
        run = aim.Run(repo=repo, capture_terminal_logs=False)
        try:  # named and set up once it exists: a run that fails here is deleted, never left half-made
            run.experiment = experiment
            apply_attributes(run, attrs)
        except BaseException as exc:
            run_hash = run.hash
            run.close()
            run = None  # no reference left (the traceback's frames are cleared too): its storage closes now
            traceback.clear_frames(exc.__traceback__)
            discard_run(aim, repo, run_hash)
            raise
        return run
    run = aim.Run(run_hash=run_hash, repo=repo, capture_terminal_logs=False)  # no experiment: it keeps its own
    try:
        resumes = list(run["resumes"])
    except KeyError:
        resumes = []
    apply_attributes(run, {k: v for k, v in attrs.items() if k not in IDENTITY})
    run["resumes"] = [*resumes, list(attrs.get("overrides", []))]
    return run


def discard_run(aim, repo: str, run_hash: str) -> None:
    """Delete a run that failed to start, once nothing refers to it (best effort: its failure is what gets said)."""
    import gc

    gc.collect()  # Aim's storage closes with the run object: deleted before that, its finalizer writes again
    try:
        aim.Repo(repo).delete_run(run_hash)
    except Exception:  # noqa: BLE001, S110 - best effort: the failure said is the run's, not this clean-up's
        pass


def apply_attributes(run, attrs: dict[str, Any]) -> None:
    """Set `attrs` on an Aim run; "name" is the run's name (``run.name``), not a param."""
    for key, value in attrs.items():
        if key == "name":
            run.name = value
        else:
            run[key] = value


def experiment_name(experiment: str | None, context: JobContext) -> str:
    return str(experiment or context.experiment or "tcgexp")


def mark_run(
    repo: str | Path, run_hash: str, attrs: dict[str, Any], tags: tuple[str, ...] = (), untag: tuple[str, ...] = ()
) -> bool:
    """Set `attrs` and move tags on a run of the local repo at `repo` after its job ended (the halving
    sweeper's trial status: pruned, promoted, complete, and its rung). Bounded like every wait on
    tracking; False (said in one line) when the run could not be marked."""

    def work(run) -> None:
        apply_attributes(run, attrs)
        for old in untag:
            if old in (run.props.tags or []):
                run.remove_tag(old)
        for tag in tags:
            if tag not in (run.props.tags or []):
                run.add_tag(tag)

    return _after(repo, run_hash, work, failed="could not mark")


def track_after(repo: str | Path, run_hash: str, values: dict[str, float], *, step: int) -> bool:
    """Track `values` into a run of the local repo at `repo` after its job ended (``tcgexp-eval``'s win rates),
    each in its subset's context, without touching its attributes. Bounded like every wait on tracking; False
    (said in one line) when the run could not be written."""

    def work(run) -> None:
        for context, group in by_context(values):
            run.track(group, step=step, context=context)

    return _after(repo, run_hash, work, failed="could not write to")


def _after(repo: str | Path, run_hash: str, work, *, failed: str) -> bool:
    """`work(run)` on an ended job's run of the local repo at `repo`, the run closed after; within CLOSE_SECONDS.
    False, said in one line ("[tracking] <failed> Aim run ..."), when it raised or did not answer in time."""
    import aim

    quiet_aim()
    errors: list[Exception] = []

    def opened() -> None:
        try:
            run = aim.Run(run_hash=run_hash, repo=str(Path(repo).expanduser().absolute()))
            try:
                work(run)
            finally:
                run.close()
        except Exception as exc:  # noqa: BLE001 - said below, once
            errors.append(exc)

    if within(CLOSE_SECONDS, opened) and not errors:
        return True
    why = one_line(errors[0]) if errors else f"no answer in {CLOSE_SECONDS:.0f} s"
    print(f"[tracking] {failed} Aim run {run_hash} in {repo} ({why})", file=sys.stderr, flush=True)
    return False
