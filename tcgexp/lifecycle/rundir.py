"""Run and sweep folders: tcgexp's only when they carry its marker, and claimed before Hydra writes.

Why: a run pointed at an existing folder of the user's (``hydra.run.dir=~/thesis``) once deleted its
``checkpoints/best/model.pt`` and overwrote its ``result.json``, because a folder that merely *looked*
like a run dir (those names, a ``.hydra/``) was taken for one; and Hydra's ``run_job`` creates the
folder and writes ``.hydra/`` and the job log before the task function runs, so a check inside
``train()`` came too late for ``.hydra/config.yaml``. Now:

- a folder is a tcgexp run dir only if it carries ``.tcgexp-run`` (a sweep dir ``.tcgexp-sweep``),
  written when tcgexp creates or first claims it; a marked folder may be used again (``resume=``
  into it, a SLURM requeue into its own dir);
- a run folder is checked, claimed and locked in one place, :func:`claim`: the refusals below, the
  marker, and the run's lock (``.tcgexp-run.lock``, an flock held for the run's life: a second run
  in the same folder is refused naming the first; the kernel drops it when its run dies). The train
  app's Hydra callback (``run_guard.RunDirGuard``, on by default) claims the folder in
  ``on_run_start``, which Hydra calls after composing and before ``run_job`` creates or writes
  anything, so a refusal, or a second run started at the same moment, leaves it exactly as it was;
  the run then takes that claim over (:func:`claimed`, around the task and ``train()``: the same
  claim, re-entered); ``train()`` called directly claims it there, accepting an unmarked folder only
  while it holds nothing but what Hydra wrote for this job;
- places no run belongs are refused whatever they hold: ``/``, home folders, system trees (``/etc``,
  ``/usr``, ...), the source tree and the launch directory or any folder above them;
- a run that is refused (a config error, a preflight check, a damaged checkpoint, ...) removes what
  its claim and Hydra put there, and the folder (with the empty ones above it) if the claim created
  it, as long as it left no outputs (``Claim.release``): no ``.hydra/`` and empty job log per
  refusal.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..console import in_multirun
from ..errors import ConfigError
from ..overrides import shell_override
from ..ownership import RUN_LOCK, HeldLock, describe, held_by_someone, holder_info, killed_while, read_info
from .ckpt_files import CheckpointError, check_folder, find

RUN_MARKER = ".tcgexp-run"
SWEEP_MARKER = ".tcgexp-sweep"
LOCK_NAME = RUN_LOCK  # rank 0's (and a plain run's) lock
REPO = Path(__file__).resolve().parents[2]  # the source tree (an editable install's checkout)
# system trees: no run dir inside them, even a new one
SYSTEM = tuple(
    Path(p)
    for p in (
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/proc",
        "/run",
        "/sbin",
        "/snap",
        "/sys",
        "/usr",
        "/var/cache",
        "/var/lib",
        "/var/log",
        "/var/spool",
        "/System",
        "/Library",
        "/Applications",
    )
)
# shared folders: never a run dir themselves (a new folder inside them is fine)
SHARED = tuple(
    Path(p)
    for p in (
        "/",
        "/home",
        "/root",
        "/tmp",
        "/var",
        "/var/tmp",
        "/opt",
        "/srv",
        "/mnt",
        "/media",
        "/Users",
        "/Volumes",
        "/private",
        "/private/tmp",
    )
)
HYDRA_FILES = (".hydra",)  # what Hydra's run_job writes, besides the job log (*.log)
# what a refused run's folder may hold to be removed whole: Hydra's files, our marker and locks, job logs
LEFT_BY_A_REFUSAL = (".hydra", RUN_MARKER)
OUTPUTS = ("checkpoints", "result.json")
RANKS_LEAVE_S = 5.0  # how long a refused rank 0 waits for the other ranks of its launch to let go of the folder
MANAGED = ("checkpoints", ".cache_spill")  # what a run replaces and removes inside its folder: no run dir goes there


def homes() -> set[Path]:
    out = {Path.home().resolve()}
    try:
        out |= {Path(p.pw_dir).resolve() for p in pwd.getpwall() if p.pw_dir not in ("", "/")}
    except (OSError, KeyError):
        pass
    return out


def refuse_place(where: Path, key: str) -> None:
    """Refuse folders no run belongs in, whatever they hold (nothing is written before this)."""
    resolved = where.resolve()
    fix = f"point {key} at a new folder, e.g. outputs/<name>"
    if resolved in SHARED or resolved in homes():
        what = (
            "the file system root"
            if resolved == Path("/")
            else ("a home folder" if resolved in homes() else "a shared system folder")
        )
        raise ConfigError(f"{key}={where} is {what}: a run writes checkpoints and results there; {fix}")
    for tree in SYSTEM:
        if resolved == tree or tree in resolved.parents:
            raise ConfigError(f"{key}={where} is inside the system folder {tree}; {fix}")
    for name, root in (("the source tree", REPO), ("the launch directory", Path.cwd().resolve())):
        if resolved == root or resolved in root.parents:
            if name == "the source tree" and not (REPO / "pyproject.toml").exists():
                continue  # an installed package: its folder is not a checkout
            raise ConfigError(f"{key}={where} is {name} or a folder above it ({root}); {fix}")
    for parent in [where, *where.parents]:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{key}={where}: {parent} is a file, not a folder; {fix}")
    for path in {where, resolved}:  # as typed and through links: another run's checkpoints/ or spill, or inside
        for folder in (path, *path.parents):
            managed = folder.name in MANAGED or folder.name.startswith(".cache_spill.rank")  # (each rank's spill)
            if managed and (folder.parent / RUN_MARKER).is_file():
                what = f"the {folder.name} folder" if folder == path else f"inside {folder}, the folder"
                raise ConfigError(
                    f"{key}={where} is {what} that the run in {folder.parent} manages (it replaces and removes "
                    f"what is there); {fix}"
                )


def foreign_entries(folder: Path, marker: str) -> list[str]:
    """What in `folder` tcgexp may not take for its own: everything, unless it carries `marker`;
    an unmarked folder may hold only what Hydra writes for a job (``.hydra/``, the job log)."""
    names = listed_before_marker(folder, marker)
    if names is None:
        return []
    return [n for n in names if not (n in HYDRA_FILES or n.endswith(".log"))]


def listed_before_marker(folder: Path, marker: str) -> list[str] | None:
    """`folder`'s entries, sorted, or None when it carries `marker` (a plain file, not a link).

    Why listed first: a run claiming a new folder makes it, then its marker; another run started at the same
    moment that looked for the marker before it was made and listed the folder after would take the marker
    for a foreign file (CI saw it: "holds files tcgexp did not write (.tcgexp-run) and no .tcgexp-run
    marker"). A listing taken before the marker is looked for holds only what came before it."""
    names = sorted(p.name for p in folder.iterdir())
    if (folder / marker).is_file() and not (folder / marker).is_symlink():
        return None
    return names


def check(where: Path, key: str = "hydra.run.dir", marker: str = RUN_MARKER, *, hydra_made: bool = True) -> None:
    """Refuse a folder a run (or sweep) must not use; nothing is written. `hydra_made`: an unmarked
    folder holding only Hydra's files for this job is accepted (``train()``, after ``run_job``)."""
    where = Path(where).expanduser().absolute()
    refuse_place(where, key)
    if not where.is_dir():
        return
    foreign = foreign_entries(where, marker) if hydra_made else (listed_before_marker(where, marker) or [])
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        hint = " (an earlier tcgexp run continues with resume=<its folder>)" if marker == RUN_MARKER else ""
        raise ConfigError(
            f"{key}={where} already holds files tcgexp did not write ({shown}) and no {marker} "
            f"marker: nothing was written there; point {key} at a new folder{hint}"
        )


def previous_run(run_dir: Path) -> str | None:
    """What another run left in `run_dir` that a fresh run would replace (its result, its checkpoints), or None."""
    found = []
    if (run_dir / "result.json").is_file():
        status = read_info(run_dir / "result.json").get("status")
        found.append(f"result.json (status {status})" if isinstance(status, str) else "result.json")
    ckpt = run_dir / "checkpoints"
    saved = sorted(p.name for p in ckpt.iterdir() if p.is_dir() and not p.name.startswith(".")) if ckpt.is_dir() else []
    if saved:
        found.append(f"checkpoints ({', '.join(saved[:3])}{', ...' if len(saved) > 3 else ''})")
    return " and ".join(found) or None


def mark(where: Path, key: str = "hydra.run.dir", marker: str = RUN_MARKER, *, hydra_made: bool = True) -> bool:
    """Check `where`, then create it if missing and mark it ours; True when this call created it.

    The marker is created exclusively: ranks of one launch claiming one folder at once agree on it,
    and it records whether its claim made the folder (only that process may remove it on a refusal).
    """
    where = Path(where).expanduser().absolute()
    check(where, key, marker, hydra_made=hydra_made)
    missing = [p for p in [where, *where.parents] if not p.exists()]  # the leaf first
    created = bool(missing)
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd = os.open(where / marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False  # marked already (a resumed run, another rank of this launch)
    except OSError as exc:
        raise ConfigError(
            f"{key}={where} cannot be created or written ({exc.strerror or exc}); point {key} at a folder you can write"
        ) from exc
    with os.fdopen(fd, "w") as fh:
        # `top`: the highest folder this claim created (outputs/<date>/ for the first run of a day)
        fh.write(
            json.dumps(
                {**holder_info(marker.lstrip(".")), "created": created, "top": str(missing[-1]) if missing else None}
            )
        )
    return created


def mine_to_discard(run_dir: Path, marker: str = RUN_MARKER) -> bool:
    """Whether `run_dir` was claimed by this process for a run (or sweep) that left nothing in it."""
    info = read_info(run_dir / marker)
    if not (info.get("pid") == os.getpid() and info.get("host") == socket.gethostname()):
        return False
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return False
    left = [
        p
        for p in entries
        if not (
            p.name in (*LEFT_BY_A_REFUSAL, marker)
            or p.name.endswith(".log")
            or (p.name.startswith((".tcgexp-run", ".tcgexp-sweep")) and p.name.endswith(".lock"))
        )
    ]
    if left:  # outputs (checkpoints/, result.json), a spill not yet removed, anything else: keep all
        return False
    # another rank lives here: the ranks of one launch are refused at the same point and let go of their locks
    # within moments of each other (each holds its own from before Hydra wrote): wait for them, briefly
    deadline = time.monotonic() + RANKS_LEAVE_S
    while any(held_by_someone(p) for p in entries if p.name.endswith(".lock")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def discard(run_dir: Path, marker: str = RUN_MARKER) -> bool:
    """Undo this process's claim of the folder of a run refused before it left anything: what it and
    Hydra wrote there, and the folder itself (with the empty ones above it) if the claim created it.
    A sweep refused before its first job (``marker=SWEEP_MARKER``) is undone the same way."""
    run_dir = Path(run_dir).absolute()
    if not mine_to_discard(run_dir, marker):
        return False
    info = read_info(run_dir / marker)
    try:
        for entry in run_dir.iterdir():
            if entry.name == marker:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        (run_dir / marker).unlink()
        if info.get("created"):
            run_dir.rmdir()
    except OSError:
        return False  # what is left stays marked: a later run may use it
    top = info.get("top")
    if info.get("created") and top and (Path(top) == run_dir or Path(top) in run_dir.parents):
        for parent in run_dir.parents:  # the empty folders this claim made above it (outputs/<date>/)
            if Path(top) not in (parent, *parent.parents):
                break
            try:
                parent.rmdir()  # only ever an empty folder: another run's there keeps it
            except OSError:
                break
    return True


def check_job_dirs(sweep: Path) -> None:
    """A sweep dir of ours again: its job folders must be ours too (or only Hydra's), before any job runs."""
    if not sweep.is_dir():
        return
    for child in sorted(sweep.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and foreign_entries(child, RUN_MARKER):
            raise ConfigError(
                f"hydra.sweep.dir={sweep}: its folder {child.name}/ holds files tcgexp did not write "
                f"({', '.join(foreign_entries(child, RUN_MARKER)[:3])}) and no {RUN_MARKER} marker; "
                "nothing was written; give the sweep a new hydra.sweep.dir"
            )


def lock_name(rank: int) -> str:
    """Rank 0 holds the run dir's own lock (a world-size-1 run is unchanged); rank r its own, in rank 0's folder."""
    return LOCK_NAME if rank == 0 else f".tcgexp-run.rank{rank}.lock"


# -- a run's claim: checked, marked, locked; taken over by the run; undone if the run is refused ----------------


class RunDirBusy(ConfigError):
    """Another live run holds this run folder (a ConfigError: printed as one line by every entry point)."""


def busy(run_dir: Path, holder: dict | None = None, name: str = LOCK_NAME) -> RunDirBusy:
    holder = holder if holder is not None else read_info(Path(run_dir) / name)
    return RunDirBusy(
        f"run dir {run_dir} is in use by another run ({describe(holder)}); give this run its "
        "own folder (hydra.run.dir=...), or wait for that one to end"
    )


class Claim:
    """This process's hold on a run folder: marked ours and locked (``lock_name``) until released."""

    def __init__(self, run_dir: Path, lock: HeldLock, killed: str | None = None) -> None:
        self.run_dir, self.lock = run_dir, lock
        self.killed = killed  # what a run that held this folder before and left no record was (unrecorded_end)
        self.owner: int | None = None  # the thread whose run took the claim over (claimed)
        self.phase: str | None = None  # what the run last said it was doing (note)
        self.depth = 0

    def note(self, phase: str) -> None:
        """Say in the lock file what the run is doing now (``unrecorded_end`` names it to the next holder, should
        the run die where it writes no record: a signal while it loads a library, a crash in native code)."""
        self.phase = phase
        try:
            self.lock.path.write_text(json.dumps({**read_info(self.lock.path), "phase": phase}))
        except OSError:
            pass

    def release(self, *, refused: bool) -> None:
        """Unlock; a run refused before it left an output then undoes the claim (``discard``), unless it is a
        sweep's job, whose folder holds the job's error for the sweep report."""
        _HELD.pop(self.run_dir, None)
        try:  # this run ended with a record (or a refusal): the next holder must not take it for killed
            self.lock.path.write_text(json.dumps({**read_info(self.lock.path), "ended": True}))
        except OSError:
            pass
        self.lock.release()  # first: discard leaves a folder whose lock someone holds
        if refused and not in_multirun():
            discard(self.run_dir)


# the run folders this process holds, by absolute path: the callback's claim, until its run takes it over
_HELD: dict[Path, Claim] = {}


def run_dir_of(resume) -> Path | None:
    """The run folder a ``resume=`` continues (a run dir, or a checkpoint inside its checkpoints/), or None."""
    if not resume:
        return None
    path = Path(str(resume)).expanduser().absolute()
    return path.parent.parent if path.parent.name == "checkpoints" else path


def unrecorded_end(run_dir: Path, holder: dict) -> str | None:
    """The run that held `run_dir`'s lock before (`holder`, as its lock file says) when it ended with no record:
    result.json missing or older than that run's start. Only a signal that ends the process where it stands
    (SIGKILL, the kernel's OOM killer, a crash in native code: SIGBUS, SIGSEGV) or a lost machine end a run so
    (every other ending writes result.json); the kernel dropped its lock. The run's last noted phase says
    where it was."""
    started = holder.get("started")
    if not started or holder.get("ended") or holder.get("host") != socket.gethostname():
        return None
    result = run_dir / "result.json"
    try:
        import datetime as dt

        began = dt.datetime.fromisoformat(started).timestamp()
        if result.is_file() and result.stat().st_mtime >= began - 1:
            return None
    except (OSError, ValueError):
        return None
    return f"the run that held {run_dir} before ({describe(holder)}) {killed_while(holder)}"


def claim(run_dir: Path, *, rank: int = 0, hydra_made: bool = True, continues: Path | None = None) -> Claim:
    """The one place a run folder is checked, claimed and locked; the claim this process holds already, if any.

    `hydra_made`: an unmarked folder holding only Hydra's files for this job is accepted (``train()``, after
    ``run_job``); the Hydra callback claims before Hydra writes, so it accepts nothing there. `continues`: the
    run folder this run continues (``resume=``, a SLURM requeue of the folder's own job); a folder holding
    the result or checkpoints of any other run is refused rather than overwritten.
    """
    run_dir, name = Path(run_dir).expanduser().absolute(), lock_name(rank)
    if run_dir in _HELD:
        return _HELD[run_dir]
    if held_by_someone(run_dir / name):  # a live run's folder: refused before anything is written
        raise busy(run_dir, name=name)
    check(run_dir, hydra_made=hydra_made)
    same_run = continues is not None and Path(continues).resolve() == run_dir.resolve()
    if not same_run and (left := previous_run(run_dir)):
        raise ConfigError(
            f"hydra.run.dir={run_dir} holds another run's {left}, which this run would replace: "
            f"continue that run with {shell_override('resume', str(run_dir))}, or give this run its own folder "
            "(hydra.run.dir=...)"
        )
    check_folder(run_dir / "checkpoints")  # checkpoint folders it would replace hold only checkpoints
    mark(run_dir, hydra_made=hydra_made)
    before = read_info(run_dir / name)  # who held it last (the lock file keeps its last holder's info)
    lock = HeldLock(run_dir / name, "run")
    try:
        holder = lock.acquire()
    except OSError as exc:  # a read-only or foreign folder: say which, before any work
        raise ConfigError(
            f"run dir {run_dir} cannot be written ({exc.strerror or exc}); point hydra.run.dir "
            "(or run_dir=) at a folder you can write"
        ) from exc
    if holder is not None:  # another run started on this folder at the same moment and locked it first
        raise busy(run_dir, holder, name)
    _HELD[run_dir] = Claim(run_dir, lock, unrecorded_end(run_dir, before) if before and rank == 0 else None)
    return _HELD[run_dir]


@contextlib.contextmanager
def claimed(run_dir: Path, *, rank: int = 0, continues: Path | None = None) -> Iterator[Claim]:
    """Around a run: its folder's claim (the Hydra callback's, taken over, or made now), re-entered by the
    same run (the task, then ``train()`` inside it); a second run of this process on the folder is
    refused as busy. When the run that took it over ends, the claim is released, and undone if the
    run was refused before it wrote an output."""
    held = claim(run_dir, rank=rank, continues=continues)
    if held.owner not in (None, threading.get_ident()):
        raise busy(held.run_dir, name=lock_name(rank))
    held.owner, held.depth = threading.get_ident(), held.depth + 1
    try:
        yield held
    except BaseException:
        held.depth -= 1
        if not held.depth:
            held.release(refused=True)
        raise
    held.depth -= 1
    if not held.depth:
        held.release(refused=False)


def requeued_resume(run_dir: Path) -> str | None:
    """The run dir to continue when this job is a SLURM requeue of itself, else None.

    SLURM restarts a requeued job (``scontrol requeue``, preemption with ``PreemptMode=REQUEUE``,
    submitit's SIGUSR2 requeue before the time limit) with the same command and
    ``SLURM_RESTART_COUNT`` >= 1, so its Hydra job lands in the same run dir: there, the run's own
    ``latest/`` is where to go on, not step 0. Anything else (a first start, a run dir with no
    checkpoint yet) starts fresh.
    """
    count = os.environ.get("SLURM_RESTART_COUNT", "")
    if not count.isdigit() or int(count) < 1:
        return None
    try:
        find(str(run_dir))
    except CheckpointError:
        return None
    return str(run_dir)
