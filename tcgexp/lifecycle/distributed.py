"""Data-parallel training over MLX's own distributed layer (``mlx.launch``: ring over TCP, or MPI).

``World.init()`` reads the rank and world size from ``mx.distributed.init()``
when a launcher started this process (it sets ``MLX_RANK``, or MPI its own
variables); a plain ``tcgexp-train`` is world size 1 and touches none of this.

What crosses ranks, and when (everything else stays on its rank):

- once per optimizer step, ONE ``all_sum`` over the flattened gradient tree
  with the step's scalars appended (real microbatches, rows, loss sums, the
  stop flag): ``Sync.reduce``. Concatenating a few hundred KB costs less than
  one round trip per tensor on a ring;
- small integer vectors: each rank's cache counters (its row of a
  [size, n] matrix, the others zero), the weights' checksum at every
  checkpoint, validation sums, the live lanes' memories for a checkpoint.

A peer that dies makes the ring's next send fail ("connection to a peer was
lost") within a second: ``PeerLost`` turns that into one line naming the rank
whose run lock is free (dead) when it can tell (waiting up to 3 s for a
dying peer's lock), so no rank waits at an all-reduce for a partner that
is gone.
"""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ..console import say_now
from ..launch import launch_time, launched
from ..overrides import shell_override
from ..ownership import HeldLock, read_info
from .errors import DistributedError
from .parent_watch import watch_launcher
from .rundir import lock_name


class PeerLost(DistributedError):
    """A collective failed because another rank is gone: the run stops on every rank."""


class ConfigsDiffer(DistributedError):
    """Ranks composed different configs: refused at start-up, on every rank, naming the keys."""


class RanksDiverged(DistributedError):
    """Ranks hold different weights: data parallelism is broken, nothing after this is one model."""


@dataclass
class World:
    rank: int = 0
    size: int = 1
    group: Any = None
    run_dir: Path | None = None  # where each rank's run lock says whether it is alive

    @classmethod
    def init(cls) -> World:
        if not launched():
            return cls()
        try:
            group = mx.distributed.init()  # the same group on every call: the run dir's resolver made it
        except RuntimeError as exc:
            raise DistributedError(
                f"[distributed] this process was launched as a rank (MLX_RANK or MPI variables "
                f"are set) but mx.distributed could not start ({exc}); launch with "
                "mlx.launch -n N --backend ring tcgexp-train ..., or unset those variables"
            ) from exc

        watch_launcher(group.rank())  # the launcher killed: this rank stops too
        # every rank exchanges the launch clock exactly once before any other collective, whether or not
        # its run dir used ${launch_now:} (a rank whose config differs must not pair mismatched all-reduces)
        launch_time()
        return cls(group.rank(), group.size(), group)

    def check_same_config(self, cfg, run_dir: Path) -> None:
        """Every rank composed the same config (and run dir), else every rank stops naming the keys.

        One all-reduce of a digest when they agree; when they do not, each rank's resolved config is
        gathered (its JSON bytes as a row) so every rank names the same keys and each rank's value.
        """
        if self.size == 1:
            return
        from omegaconf import OmegaConf

        mine = {
            "run_dir": str(Path(run_dir).absolute()),
            **flat(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)),
        }
        blob = json.dumps(mine, sort_keys=True, default=str).encode()
        digest = np.frombuffer(hashlib.sha256(blob).digest()[:16], np.uint16).astype(np.int64)
        if all(np.array_equal(r, digest) for r in self.gather_rows(digest, "the configs' checksum at start-up")):
            return
        longest = int(self.gather_rows(np.array([len(blob)]), "the configs' sizes").max())
        row = np.zeros(longest, np.int64)
        row[: len(blob)] = np.frombuffer(blob, np.uint8)
        configs = [
            json.loads(bytes(r[r > 0].astype(np.uint8)).decode())
            for r in self.gather_rows(row, "the configs at start-up")
        ]
        keys = sorted(k for k in set().union(*configs) if len({json.dumps(c.get(k), default=str) for c in configs}) > 1)
        shown = "; ".join(
            f"{k} (" + ", ".join(f"rank {r}: {c.get(k, '<unset>')}" for r, c in enumerate(configs)) + ")"
            for k in keys[:4]
        ) + (f"; and {len(keys) - 4} more" if len(keys) > 4 else "")
        exc = ConfigsDiffer(
            f"[distributed] the ranks composed different configs: {shown}; every rank must compose "
            "the same run: launch them with the same command line, config files and environment"
        )
        say_now(exc)  # every rank says it before the launcher, seeing one leave, SIGTERMs the others
        raise exc

    @property
    def lead(self) -> bool:
        """Rank 0 writes, tracks and reports for the run."""
        return self.rank == 0

    # -- collectives (every rank calls each one, in the same order) --------------------------------
    def all_sum(self, x: mx.array, what: str) -> mx.array:
        """`x` summed over ranks, evaluated (so a lost peer surfaces here, named by `what`)."""
        if self.size == 1:
            return x
        try:
            out = mx.distributed.all_sum(x, group=self.group, stream=mx.cpu)
            mx.eval(out)
        except RuntimeError as exc:
            raise self.lost(what, exc) from exc
        return out

    def sum(self, row: np.ndarray, what: str) -> np.ndarray:
        """`row` summed over ranks (float32 on the wire); one process keeps its own float64 row."""
        if self.size == 1:
            return row
        return np.array(self.all_sum(mx.array(row), what))

    def gather_rows(self, row: np.ndarray, what: str) -> np.ndarray:
        """[size, n]: every rank's `row` (float64 or int64), by one all_sum of a matrix with ours filled."""
        row = np.asarray(row)
        if self.size == 1:
            return row[None]
        dtype = np.int64 if np.issubdtype(row.dtype, np.integer) else np.float64
        block = np.zeros((self.size, len(row)), dtype)
        block[self.rank] = row
        return np.array(self.all_sum(mx.array(block), what))

    def barrier(self, what: str) -> None:
        """Wait until every rank is here (a one-number all_sum)."""
        self.all_sum(mx.array([0.0]), what)

    def signal_row(self, signame: str | None) -> np.ndarray:
        """[size]: this rank's stop signal number in its own slot (0: none). Summed over ranks, inside
        whichever all-reduce carries it, it holds every rank's: ``first_signal`` reads it."""
        row = np.zeros(self.size)
        if signame:
            row[self.rank] = int(getattr(signal, signame))
        return row

    @staticmethod
    def first_signal(row) -> str | None:
        """The signal every rank stops for, from a summed signal row: the lowest signalled rank's
        (None: no rank was signalled). Every rank reads the same row, so all name the same signal."""
        first = next((int(s) for s in row if s), 0)
        return signal.Signals(first).name if first else None

    def agree(self, signame: str | None, what: str) -> str | None:
        """The stop signal any rank has received, so all stop at the same point (one small all_sum)."""
        row = self.all_sum(mx.array(self.signal_row(signame), dtype=mx.float32), what)
        return self.first_signal(np.array(row))

    def check_same_weights(self, model, where: str) -> None:
        """Every rank's parameters hash alike (sha256 of the bytes), else stop naming the ranks and step."""
        if self.size == 1:
            return
        h = hashlib.sha256()
        for name, value in tree_flatten(model.parameters()):
            h.update(name.encode())
            h.update(np.array(value).tobytes())
        mine = np.frombuffer(h.digest()[:16], np.uint16).astype(np.int64)  # 8 exact 16-bit words
        rows = self.gather_rows(mine, f"the weights' checksum at {where}")
        differ = [r for r in range(self.size) if not np.array_equal(rows[r], rows[0])]
        if differ:
            raise RanksDiverged(
                f"rank(s) {', '.join(map(str, differ))} hold different weights from rank 0 at "
                f"{where}: the ranks no longer train one model; stop and resume from the last "
                "checkpoint (all ranks started from its weights)"
            )

    # -- a lost peer ----------------------------------------------------------------------------
    def lost(self, what: str, exc: BaseException) -> PeerLost:
        dead = self.dead_ranks()
        who = (
            f"rank {', '.join(map(str, dead))} died"
            if dead
            else "a peer rank died or became unreachable (its host's log names it)"
        )
        return PeerLost(
            f"[distributed] rank {self.rank} of {self.size}: {who}; lost at {what} ({exc}); the run "
            f"stops on every rank; {shell_override('resume', str(self.run_dir))} continues from its last latest/ with "
            f"{self.size} ranks"
        )

    def dead_ranks(self, grace: float = 3.0) -> list[int]:
        """Ranks on this host whose run lock is free: their process is gone (flock dies with it).

        Probed for up to `grace` seconds: a killed process's sockets can close before its lock's
        descriptor does (the kernel closes a dying process's files one by one, after freeing its
        memory), so the peer sees the connection drop while the lock is, for a moment, still held.
        """
        if self.run_dir is None:
            return []
        locks = {r: Path(self.run_dir) / lock_name(r) for r in range(self.size) if r != self.rank}
        here = {
            r: path
            for r, path in locks.items()
            if path.exists() and read_info(path).get("host") == socket.gethostname()
        }
        deadline = time.monotonic() + grace
        while True:
            dead = [r for r, path in here.items() if lock_free(path)]
            if dead or not here or time.monotonic() >= deadline:
                return dead
            time.sleep(0.05)


def lock_free(path: Path) -> bool:
    """Whether nobody holds the flock on `path` (probed by taking and at once releasing it)."""
    lock = HeldLock(path, "probe")
    try:
        return lock.acquire() is None
    except OSError:
        return False
    finally:
        lock.release()


def flat(tree, prefix: str = "") -> dict:
    """{dotted.key: leaf value} of a nested dict (lists are leaves)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict = {}
    for k, v in tree.items():
        out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


class Sync:
    """The optimizer step's one all-reduce: gradients flattened, the step's scalars appended.

    Ranks with no real microbatch in a window (shard padding) send zeros: the same tree shape,
    so every rank's vector lines up.
    """

    def __init__(self, world: World, params) -> None:
        self.world = world
        leaves = tree_flatten(params)
        self.names = [k for k, _ in leaves]
        self.shapes = [v.shape for _, v in leaves]
        self.sizes = [int(v.size) for _, v in leaves]
        self.zeros = tree_unflatten([(k, mx.zeros_like(v)) for k, v in leaves])

    def reduce(self, grads, scalars: np.ndarray, where: str):
        """(summed gradient tree, summed scalars).

        One process takes the same path minus the all_sum (summing with zeros is exact): the update
        then sees the same float32 values in the same buffers, so one process running the ranks'
        shards in turn (``tbptt.shards``) ends bit-identical to the ranks."""
        leaves = [v for _, v in tree_flatten(grads if grads is not None else self.zeros)]
        flat = mx.concatenate([v.reshape(-1) for v in leaves] + [mx.array(scalars.astype(np.float32))])
        total = np.array(self.world.all_sum(flat, f"the gradient all-reduce of {where}"))
        out, offset = [], 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes):
            # a fresh buffer per leaf, not a view into the flat sum: the CPU kernels reduce a view at an
            # unaligned offset in another order, and the clip's norm would differ from one process's
            out.append((name, mx.array(total[offset : offset + size].reshape(shape))))
            offset += size
        return tree_unflatten(out), total[offset:].astype(np.float64)
