"""What a run carries from step to step, explicitly (mlx-examples style), and saves to resume exactly.

``LaneMemory``: each lane's recurrent memory between its chunks (TBPTT's carried
state, outside any graph). ``TrainState``: where the run is in its plans, its
counters, its best validation loss and its history.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import mlx.core as mx
import numpy as np

from .batch import Prepared


class LaneMemory:
    """Each lane's memory between its chunks: [lanes, hidden] float32, reset at epoch start.

    Kept in MLX, not numpy: reading a microbatch's lanes (``read``) and writing their carry back
    (``write``) are a gather and a scatter in the step's own stream, so the next microbatch can be
    dispatched before this one's results are read back (the loop reads them a microbatch late).
    The table has one spare row at the end, where padding lanes write. The scatter reuses the
    table's buffer (MLX donates an array no one else holds): writing costs the lanes written, not
    the table, which at a year's corpus is 300k lanes x hidden.
    """

    def __init__(self, lanes: int, hidden: int) -> None:
        self.lanes, self.hidden = lanes, hidden
        self._table: mx.array | None = None  # all zeros until first used (a year's table is 150 MB)

    @property
    def table(self) -> mx.array:
        if self._table is None:
            self._table = mx.zeros((self.lanes + 1, self.hidden), dtype=mx.float32)
        return self._table

    def reset(self) -> None:
        self._table = None

    def rows(self, lanes: np.ndarray) -> np.ndarray:
        """The memory of `lanes` (global lane ids): [len(lanes), hidden] float32."""
        if self._table is None:
            return np.zeros((len(lanes), self.hidden), np.float32)
        # numpy's view of the evaluated table, gathered on the host: no MLX graph and stream round trip while a
        # latest/ save keeps the step waiting
        return np.asarray(self._table)[np.asarray(lanes, np.int64)]

    def load(self, h: np.ndarray) -> None:
        """Replace every lane's memory with `h` [lanes, hidden] (a resumed checkpoint's)."""
        self._table = mx.array(np.concatenate([np.asarray(h, np.float32), np.zeros((1, self.hidden), np.float32)]))

    def _where(self, prep: Prepared, lanes_pad: int) -> mx.array:
        idx = np.full(lanes_pad, self.lanes, np.int32)  # padding lanes: the spare row
        idx[: prep.lanes] = prep.lane_ids
        return mx.array(idx)

    def read(self, prep: Prepared, lanes_pad: int) -> mx.array:
        """h0 [lanes_pad, hidden]: the carried memory of each lane, zeros for fresh and padding lanes."""
        keep = np.zeros((lanes_pad, 1), np.float32)
        keep[: prep.lanes, 0] = ~prep.lane_fresh
        return mx.take(self.table, self._where(prep, lanes_pad), axis=0) * mx.array(keep)

    def write(self, prep: Prepared, carry: mx.array) -> None:
        self.table[self._where(prep, carry.shape[0])] = carry  # a scatter into the table (its buffer, donated)


@dataclass
class TrainState:
    """Where the run is; saved in state.json so a resume continues exactly here.

    ``epoch`` counts the epochs completed (so it is also the 0-based index of the one in progress);
    every epoch a person reads is numbered from 1 (``human_epoch``, history, ``best_epoch``, the
    progress bar, Aim, result.json, ``epoch_NNNN/``): epoch 1 is the first.
    """

    epoch: int = 0
    position: int = 0  # next microbatch of this epoch's plan
    opt_steps: int = 0  # optimizer updates applied, whole run
    microbatches: int = 0  # plan positions processed, whole run (with shards: padding included)
    epoch_microbatches: int = 0  # positions processed in the current epoch (incl. before a resume)
    epoch_opt_steps: int = 0
    real: int = 0  # microbatches with rows processed, whole run, over all ranks
    epoch_real: int = 0
    rows: int = 0
    best_val_loss: float | None = None  # None until a finite validation loss exists
    best_epoch: int | None = None  # numbered from 1, as history's "epoch"
    history: list = field(default_factory=list)  # one entry per finished epoch
    epochs_from: int = 1  # how best_epoch and history count (checkpoints written before this field: from 0)

    def state_dict(self) -> dict:
        return asdict(self)

    @property
    def human_epoch(self) -> int:
        """The epoch a person would name now: the one in progress, or at a boundary the one just finished."""
        return self.epoch + 1 if self.position else max(self.epoch, 1)

    @classmethod
    def from_state(cls, saved: dict) -> TrainState:
        saved = {"real": saved.get("microbatches", 0), "epoch_real": saved.get("epoch_microbatches", 0), **saved}
        if saved.get("epochs_from", 0) == 0:  # a checkpoint that numbered epochs from 0: renumbered on load
            saved["history"] = [{**h, "epoch": i + 1} for i, h in enumerate(saved.get("history") or [])]
            saved["best_epoch"] = None if saved.get("best_epoch") is None else int(saved["best_epoch"]) + 1
            saved["epochs_from"] = 1
        p = cls(**saved)  # (checkpoints from before shards had no padding: real == positions)
        if p.best_val_loss is not None and not np.isfinite(p.best_val_loss):  # checkpoints before strict JSON
            p.best_val_loss, p.best_epoch = None, None
        return p
