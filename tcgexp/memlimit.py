"""The memory this process may use: its job's limit, not the machine's free memory.

Why: the memory check compared a run's estimate with the machine's free memory, but a job under
SLURM (``--mem``), Kubernetes, ``systemd-run -p MemoryMax=`` or Docker ``--memory`` lives in a
cgroup whose limit the kernel enforces with its OOM killer long before the machine is full. The room
a run has is the least of:

- its own cgroup's limit, the lowest on the way up to the hierarchy's root (cgroup v2 ``memory.max``,
  v1 ``memory.limit_in_bytes``), less what other processes of that cgroup hold that cannot be
  reclaimed (page cache can);
- SLURM's allocation per task (``SLURM_MEM_PER_CPU`` x ``SLURM_CPUS_PER_TASK``, or
  ``SLURM_MEM_PER_NODE`` / ``SLURM_NTASKS_PER_NODE``; SLURM's numbers are MiB);
- what the machine has free, plus what this process holds already.

``/proc`` is read through `proc` so tests can point at a made-up tree; nothing here raises: a file
that cannot be read is a limit that is not there.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


@dataclass(frozen=True)
class Room:
    bytes: int  # what this process may hold in all (what it holds now included)
    source: str  # which limit binds, for messages


def _int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def _stat(path: Path) -> dict[str, int]:
    out = {}
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[name] = int(value)
    except (OSError, UnicodeDecodeError):
        pass
    return out


def cgroup_dirs(proc: Path = Path("/proc"), pid: str = "self") -> list[tuple[int, Path, Path]]:
    """(cgroup version, the process's cgroup dir, its hierarchy's mount point) for each memory hierarchy."""
    try:
        groups = (proc / pid / "cgroup").read_text().splitlines()
        mounts = (proc / pid / "mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point, fstype, options = fields[3], fields[4], rest[0], rest[2].split(",")
        if fstype == "cgroup2":
            version, want = 2, ""
        elif fstype == "cgroup" and "memory" in options:
            version, want = 1, "memory"
        else:
            continue
        for g in groups:
            parts = g.split(":", 2)
            if (
                len(parts) != 3
                or (version == 2 and parts[0] != "0")
                or (version == 1 and want not in parts[1].split(","))
            ):
                continue
            path = parts[2]
            rel = path[len(root) :] if root != "/" and path.startswith(root) else path
            where = Path(point)
            leaf = where / rel.lstrip("/")
            found.append((version, leaf if leaf.is_dir() else where, where))  # a namespaced view: its root
    return found


def _own_unreclaimable(proc: Path, pid: str) -> int:
    """What this process holds that its cgroup cannot reclaim (anonymous and shared memory)."""
    own = 0
    try:
        for line in (proc / pid / "status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssShmem:")):
                own += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return own


def cgroup_room(proc: Path = Path("/proc"), pid: str = "self") -> Room | None:
    """The tightest memory cgroup limit over this process, less what the cgroup's other processes hold."""
    best: Room | None = None
    own = _own_unreclaimable(proc, pid)
    for version, leaf, top in cgroup_dirs(proc, pid):
        limit_file, usage_file = (
            ("memory.max", "memory.current") if version == 2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
        )
        node = leaf
        while True:
            limit = _int(node / limit_file)
            if limit is not None:  # usage counts the whole subtree; page cache (not tmpfs) is reclaimable
                stat = _stat(node / "memory.stat")
                pre = "" if version == 2 else "total_"
                cache = stat.get(f"{pre}file" if version == 2 else "total_cache", 0) - stat.get(f"{pre}shmem", 0)
                others = max(0, (_int(node / usage_file) or 0) - max(cache, 0) - own)
                room = Room(
                    limit - others,
                    f"cgroup v{version} {node / limit_file} = {limit / 2**30:,.1f} GiB"
                    + (f", {others / 2**30:,.1f} GiB of it held by other processes" if others >= 2**26 else ""),
                )
                if best is None or room.bytes < best.bytes:
                    best = room
            if node == top or node.parent == node:
                break
            node = node.parent
    return best


def slurm_room(env: Mapping[str, str]) -> Room | None:
    """SLURM's allocation for this task (MiB in SLURM's variables), when the job runs under SLURM."""

    def number(name: str) -> int | None:
        try:
            return int(str(env.get(name, "")).split("(")[0].split(",")[0])
        except ValueError:
            return None

    per_cpu, per_node = number("SLURM_MEM_PER_CPU"), number("SLURM_MEM_PER_NODE")
    if per_cpu:
        cpus = number("SLURM_CPUS_PER_TASK") or 1
        return Room(per_cpu * cpus * 2**20, f"SLURM_MEM_PER_CPU={per_cpu} MiB x {cpus} CPU(s) per task")
    if per_node:
        tasks = number("SLURM_NTASKS_PER_NODE") or 1
        return Room(
            per_node * 2**20 // tasks,
            f"SLURM_MEM_PER_NODE={per_node} MiB" + (f" / {tasks} tasks per node" if tasks > 1 else ""),
        )
    return None


def machine_room() -> Room:
    import psutil

    held = psutil.Process().memory_info().rss
    return Room(psutil.virtual_memory().available + held, "the machine's free memory")


def room(proc: Path = Path("/proc"), env: Mapping[str, str] | None = None) -> Room:
    """The least of the cgroup's, SLURM's and the machine's room for this process."""
    rooms = [
        r for r in (cgroup_room(proc), slurm_room(os.environ if env is None else env), machine_room()) if r is not None
    ]
    return min(rooms, key=lambda r: r.bytes)


def peak_rss_bytes(proc: Path = Path("/proc")) -> int:
    """This process's own peak resident memory since it started its program (``VmHWM``).

    Why not ``getrusage().ru_maxrss``: Linux keeps it across ``execve``, and Python's subprocess spawns with
    vfork, so a child's ru_maxrss starts at its parent's peak (a child of a 1.6 GB pytest reads 1.6 GB, however
    little it holds). ``VmHWM`` belongs to the address space exec made. Where /proc has no ``status`` (not Linux),
    ru_maxrss (KiB on Linux, bytes on macOS) is the answer there is."""
    try:
        with open(proc / "self" / "status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
