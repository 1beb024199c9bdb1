"""Live spill dirs, registered per user, so any later run reclaims those of dead runs.

Why: a spill dir is wiped when a cache reopens the *same* path, but a fresh
run, or a ``resume=``, uses a new run folder, so every SIGKILLed run's spill
stayed on disk forever (the seed's 70 GiB incident). Each spill store
registers its directory here (one small JSON entry pointing at it) and holds
the flock on its marker (``ownership``) for its life; ``reclaim()``, run at
the start of every training run, removes the spill dirs whose lock is free
(owner dead), wherever their run folders are, and only those that carry
tcgexp's marker.

Where: ``$TCGEXP_STATE_DIR/spill/`` (tests point it at a tmp dir), else
``$XDG_STATE_HOME/tcgexp/spill/``, else ``~/.local/state/tcgexp/spill/``. A
registry that cannot be written costs only the reclaiming (one warning).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tcgexp.ownership import held_by_someone, holder_info, is_spill_file, pid_alive, read_info, remove_owned, tree_bytes

_warned = False


def state_dir() -> Path:
    if os.environ.get("TCGEXP_STATE_DIR"):
        return Path(os.environ["TCGEXP_STATE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state") / "tcgexp"


def registry_dir() -> Path:
    return state_dir() / "spill"


def entry_path(spill_dir: Path) -> Path:
    key = hashlib.sha1(str(Path(spill_dir).absolute()).encode()).hexdigest()[:20]
    return registry_dir() / f"{key}.json"


def register(spill_dir: Path) -> Path | None:
    """Record `spill_dir` (already created and locked by its store); the entry's path, or None."""
    global _warned
    entry = entry_path(spill_dir)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"path": str(Path(spill_dir).absolute()), **holder_info("spill")}))
        os.replace(tmp, entry)  # a reader sees the whole entry or none
    except OSError as exc:
        if not _warned:
            _warned = True
            warnings.warn(
                f"cannot register spill dirs in {entry.parent} ({exc}); a killed run's spill will not "
                "be reclaimed by later runs (set TCGEXP_STATE_DIR to a writable folder)",
                RuntimeWarning,
                stacklevel=3,
            )
        return None
    return entry


def unregister(entry: Path | None) -> None:
    if entry is not None:
        try:
            entry.unlink(missing_ok=True)
        except OSError:
            pass


@dataclass
class Reclaimed:
    dirs: list[str] = field(default_factory=list)
    bytes: int = 0

    def line(self) -> str | None:
        """One line for the run's report, or None when nothing was reclaimed."""
        if not self.dirs:
            return None
        shown = ", ".join(self.dirs[:3]) + (f" and {len(self.dirs) - 3} more" if len(self.dirs) > 3 else "")
        return f"[cache] reclaimed {self.bytes / 2**20:.1f} MiB of spill left by dead runs ({len(self.dirs)} dirs: {shown})"


def reclaim(marker: str) -> Reclaimed:
    """Remove the registered spill dirs whose owner is dead (lock free) and the entries that point at them."""
    out = Reclaimed()
    try:
        entries = sorted(registry_dir().glob("*.json"))
    except OSError:
        return out
    host = socket.gethostname()
    for entry in entries:
        info = read_info(entry)
        if not info.get("path"):
            continue  # being written (tmp names are not *.json), or not ours: leave it
        if info.get("host") != host:
            continue  # flock says nothing about another host's processes
        path = Path(info["path"])
        if not path.exists():
            unregister(entry)
            continue
        held = held_by_someone(path / marker)
        if held or (held is None and pid_alive(info.get("pid"))):
            continue  # a live owner, or one mid-creation / mid-removal
        if (path / marker).is_file():
            size = tree_bytes(path)
            if remove_owned(path, marker, what="spill dir", ours=is_spill_file):
                out.dirs.append(str(path))
                out.bytes += size
        else:  # not tcgexp's (any more): never deleted, only forgotten
            remove_owned(path, marker, what="spill dir")  # warns and leaves it
        unregister(entry)
    return out
