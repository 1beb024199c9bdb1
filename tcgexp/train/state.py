"""What a run carries from step to step, explicitly (mlx-examples style), and saves to resume exactly.

``LaneMemory``: each lane's recurrent memory between its chunks (TBPTT's carried
state, outside any graph). ``TrainState``: where the run is in its plans, its
counters, its best validation loss and its history.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import mlx.core as mx
import numpy as np

from .batch import Prepared


class LaneMemory:
    """Each lane's memory between its chunks: [lanes, hidden] float32, reset at epoch start."""

    def __init__(self, lanes: int, hidden: int) -> None:
        self.h = np.zeros((lanes, hidden), np.float32)

    def reset(self) -> None:
        self.h[:] = 0.0

    def read(self, prep: Prepared, lanes_pad: int) -> mx.array:
        h0 = np.zeros((lanes_pad, self.h.shape[1]), np.float32)
        carried = ~prep.lane_fresh
        h0[:prep.lanes][carried] = self.h[prep.lane_ids[carried]]
        return mx.array(h0)

    def write(self, prep: Prepared, carry: mx.array) -> None:
        self.h[prep.lane_ids] = np.array(carry[:prep.lanes])


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
    best_val_loss: Optional[float] = None  # None until a finite validation loss exists
    best_epoch: Optional[int] = None  # numbered from 1, as history's "epoch"
    history: list = field(default_factory=list)  # one entry per finished epoch
    epochs_from: int = 1  # how best_epoch and history count (checkpoints written before this field: from 0)

    def state_dict(self) -> dict:
        return asdict(self)

    @property
    def human_epoch(self) -> int:
        """The epoch a person would name now: the one in progress, or at a boundary the one just finished."""
        return self.epoch + 1 if self.position else max(self.epoch, 1)

    @classmethod
    def from_state(cls, saved: dict) -> "TrainState":
        saved = {"real": saved.get("microbatches", 0), "epoch_real": saved.get("epoch_microbatches", 0), **saved}
        if saved.get("epochs_from", 0) == 0:  # a checkpoint that numbered epochs from 0: renumbered on load
            saved["history"] = [{**h, "epoch": i + 1} for i, h in enumerate(saved.get("history") or [])]
            saved["best_epoch"] = None if saved.get("best_epoch") is None else int(saved["best_epoch"]) + 1
            saved["epochs_from"] = 1
        p = cls(**saved)  # (checkpoints from before shards had no padding: real == positions)
        if p.best_val_loss is not None and not np.isfinite(p.best_val_loss):  # checkpoints before strict JSON
            p.best_val_loss, p.best_epoch = None, None
        return p
