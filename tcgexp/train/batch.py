"""Loader batch -> fixed-shape numpy inputs for the compiled step.

Shapes are padded to a few buckets (rows to the row budget, decisions and
lanes to a power of two, decisions at most to the chunk) so ``mx.compile``
traces a handful of graphs instead of one per microbatch; with long chunks
(``tbptt.chunk=128``) most microbatches hold far fewer decisions per lane than
the chunk allows (the row budget binds first), and the scan need not run over
the difference. Padding rows have weight 0 and padding
decisions come after a lane's last real decision, so neither reaches a loss
or a carried memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..plan.loader import Batch

EARLY_DECISIONS = 8  # "first decisions of an episode": where memory has the least to go on


def bucket(n: int, lo: int = 4) -> int:
    return max(lo, 1 << max(0, n - 1).bit_length())


def padded_slots(rows_pad: int, decisions_pad: int) -> int:
    """The most (lane x decision) slots ``prepare`` pads a microbatch of at most `rows_pad` rows to.

    A microbatch's lanes and its longest lane's decisions share the row budget (every lane holds a
    row, every decision at least one: lanes + decisions - 1 <= rows), so a long chunk buys decisions
    only where rows allow them: ``tbptt.chunk=100000`` pads no more than ``chunk=256`` does at 256 rows.
    The largest product sits where a bucket of decisions begins (2**k + 1): the lanes' bucket only
    shrinks as decisions grow.
    """
    top = min(decisions_pad, rows_pad)
    starts = {1, top, *(2**k + 1 for k in range(top.bit_length()) if 2**k + 1 <= top)}
    return max(bucket(rows_pad - m + 1) * min(bucket(m), max(decisions_pad, m)) for m in starts)


@dataclass
class Prepared:
    index: int
    rows: int  # real rows
    lanes: int  # real lanes
    lane_ids: np.ndarray  # int64 [lanes]
    lane_fresh: np.ndarray  # bool [lanes]
    inputs: dict  # model kwargs except h0 (the trainer adds it from the lane memory)
    targets: dict


def prepare(batch: Batch, *, rows_pad: int, decisions_pad: int) -> Prepared:
    mb, a = batch.mb, batch.arrays
    R, L = mb.rows, mb.lanes
    most = int(mb.lane_decisions.max())
    Lp, T = bucket(L), min(bucket(most), max(decisions_pad, most))
    if R > rows_pad:
        raise ValueError(f"microbatch {mb.index} has {R} rows, more than the row budget {rows_pad}")
    A = a["action_mask"].shape[1]
    valid = a["would_ko_valid"]
    x = np.zeros((rows_pad, a["features"].shape[1] + A + 1), np.float32)
    x[:R, :-A - 1] = a["features"]
    x[:R, -A - 1:-1] = a["would_ko"] * valid[:, None]
    x[:R, -1] = valid
    row_lane = np.zeros(rows_pad, np.int32)
    row_dec = np.zeros(rows_pad, np.int32)
    row_lane[:R], row_dec[:R] = mb.row_lane, mb.row_dec
    # the first row of each decision feeds the memory; rows are grouped by (lane, decision)
    starts = np.flatnonzero(np.diff(mb.row_lane * T + mb.row_dec, prepend=-1))
    first_row = np.zeros((Lp, T), np.int32)
    first_row[mb.row_lane[starts], mb.row_dec[starts]] = starts
    label_hot = np.zeros((Lp, T, A), np.float32)
    np.add.at(label_hot, (mb.row_lane, mb.row_dec, a["label"]), 1.0)
    lane_decisions = np.zeros(Lp, np.int32)
    lane_decisions[:L] = mb.lane_decisions

    def pad(v, fill=0):
        out = np.full((rows_pad,) + v.shape[1:], fill, dtype=v.dtype)
        out[:R] = v
        return out

    weight = np.zeros(rows_pad, np.float32)
    weight[:R] = 1.0
    early = np.zeros(rows_pad, np.float32)
    early[:R] = (mb.lane_dec_start[mb.row_lane] + mb.row_dec) < EARLY_DECISIONS
    targets = {
        "action_mask": pad(a["action_mask"], True), "label": pad(a["label"]), "row_weight": weight,
        "row_early": early, "aux_valid": pad(a["aux_valid"]).astype(np.float32),
        **{k: pad(a[k]) for k in ("aux_ko", "aux_prize_delta", "aux_terminal", "aux_return")},
    }
    inputs = {"x": x, "row_lane": row_lane, "row_dec": row_dec, "first_row": first_row,
              "label_hot": label_hot, "lane_decisions": lane_decisions}
    return Prepared(mb.index, R, L, mb.lane_ids, mb.lane_fresh, inputs, targets)
