"""What a run sends its tracker, and when: the training values at ``trainer.track_every`` optimizer steps,
every epoch's last step and every validation exactly.

Why a cadence (Lightning's ``log_every_n_steps``): a step tracks about 40 values (``train/*``, ``lr``, ~30
``cache_train/*`` counters) and Aim writes each as its own RocksDB puts, about 130 us a value in its own
process, which on 2 cores competes with the step itself; with several ranks the counters are also one
gather per step. ``track_every=1`` tracks every optimizer step (the reference system's cadence); values
the cadence selects all reach the tracker, and so does the last step of every epoch and of a run that
stops, whatever its number (``flush``).

The tracker's run opens in its own process while the run starts; its hash is read on a thread of its own
(``hash``: None until it is known, never a wait), so no checkpoint waits for it; ``final_hash`` waits for
it, bounded by the tracker, once the run is over.
"""

from __future__ import annotations

import threading

from ..lifecycle.distributed import World
from .outputs import rank_counters, sum_counters


class TrackedSteps:
    def __init__(self, tracker, world: World, caches: tuple, every: int) -> None:
        self.tracker, self.world, self.caches, self.every = tracker, world, caches, every
        self._pending: tuple[dict, int, int] | None = None  # an untracked step's values: (values, step, epoch)
        self._hash: str | None = None
        self._reader = threading.Thread(target=self._read_hash, daemon=True, name="tcgexp-tracker-hash")
        self._reader.start()

    def _read_hash(self) -> None:
        try:
            self._hash = self.tracker.hash  # the tracker bounds its own wait
        except Exception:  # noqa: BLE001 - a tracker's failure costs tracking only (it says so itself)
            self._hash = None

    @property
    def hash(self) -> str | None:
        """The tracked run's hash if it is known already (what a checkpoint records); never waits."""
        return self._hash

    def final_hash(self) -> str | None:
        """The hash once the run is over (result.json): waits for the tracker's answer, bounded by it."""
        self._reader.join()
        return self._hash

    def step(self, metrics: dict, step: int, epoch: int) -> dict | None:
        """After optimizer update `step` (of `epoch`, from 1): tracked now when the cadence selects it (the
        train cache's counters returned, for the display), else held until the next or the epoch's end."""
        values = {f"train/{k}": v for k, v in metrics.items() if k not in ("lr", "grad_norm", "rows")}
        values["lr"], values["train/grad_norm"] = metrics["lr"], metrics["grad_norm"]
        if step % self.every:
            self._pending = (values, step, epoch)
            return None
        self._pending = None
        return self._send("cache_train", self.caches[0], values, step, epoch)

    def flush(self) -> None:
        """The last untracked step's values (an epoch's end, a stop): every rank calls it at the same point."""
        if self._pending is not None:
            values, step, epoch = self._pending
            self._pending = None
            self._send("cache_train", self.caches[0], values, step, epoch)

    def validation(self, metrics: dict, step: int, epoch: int) -> None:
        """An epoch's end: its last step's training values, then the validation's, exactly."""
        self.flush()
        values = {f"val/{k}": v for k, v in metrics.items() if k != "epoch" and v is not None}
        self._send("cache_val", self.caches[1], values, step, epoch)

    def _send(self, prefix: str, cache, values: dict, step: int, epoch: int) -> dict:
        per_rank = rank_counters(self.world, cache, prefix.removeprefix("cache_"))  # every rank: a gather
        counters = sum_counters(per_rank)
        self.tracker.track({**values, **{f"{prefix}/{k}": v for k, v in counters.items()}}, step=step, epoch=epoch)
        if len(per_rank) > 1:  # each rank's own counters, with the Aim context {"rank": r} (the sums untagged)
            for r, own in enumerate(per_rank):
                self.tracker.track(
                    {f"{prefix}/{k}": v for k, v in own.items()}, step=step, epoch=epoch, context={"rank": r}
                )
        return counters
