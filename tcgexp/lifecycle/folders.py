"""Which folders are tcgexp's, and which places no run belongs in: the markers, the refusals, the undoing.

A folder is a tcgexp run dir only if it carries ``.tcgexp-run`` (a sweep dir ``.tcgexp-sweep``); system
trees, home and shared folders, the source tree and the launch directory are refused whatever they hold;
a refused run removes what its claim and Hydra put there (``discard``). The claim that checks, marks and
locks a run's folder in one place is ``rundir.py`` (its docstring tells why).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import time
from pathlib import Path

from ..errors import ConfigError
from ..ownership import held_by_someone, holder_info, read_info

RUN_MARKER = ".tcgexp-run"
SWEEP_MARKER = ".tcgexp-sweep"
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
