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
AUX_TARGETS = ("aux_ko", "aux_prize_delta", "aux_terminal", "aux_return")  # float32 per row, as in the file


def bucket(n: int, lo: int = 4) -> int:
    return max(lo, 1 << max(0, n - 1).bit_length())


def buckets(n: np.ndarray, lo: int = 4) -> np.ndarray:
    """``bucket`` of every element of `n` (all >= 1)."""
    return np.maximum(lo, 1 << np.ceil(np.log2(np.asarray(n, np.float64))).astype(np.int64))


def largest_padding(plan, decisions_pad: int) -> int:
    """The most (lane x decision) slots ``prepare`` pads any microbatch of `plan` to (0 for an empty plan).

    What a step holds beyond its rows grows with these slots, and the plan knows them exactly: each
    microbatch's lanes and its longest lane's decisions, both bucketed as ``prepare`` pads them. They
    share the row budget (every lane holds a row, every decision at least one), so a chunk longer
    than a microbatch can hold costs nothing more.
    """
    sizes = np.diff(plan.bounds)
    starts = plan.bounds[:-1][sizes > 0]  # shard padding: empty microbatches
    if not len(starts):
        return 0
    most = np.maximum.reduceat(plan.d1 - plan.d0, starts)
    return int((buckets(sizes[sizes > 0]) * np.minimum(buckets(most), np.maximum(decisions_pad, most))).max())


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
    # Runs once per microbatch on the loader's thread, beside the step on the same cores: every numpy call
    # costs ~1 us of Python before its work, so each array is made in as few calls as its values allow.
    mb, a = batch.mb, batch.arrays
    R, L = mb.rows, mb.lanes
    most = int(mb.lane_decisions.max())
    Lp, T = bucket(L), min(bucket(most), max(decisions_pad, most))
    if R > rows_pad:
        raise ValueError(f"microbatch {mb.index} has {R} rows, more than the row budget {rows_pad}")
    feats, mask = a["features"], a["action_mask"]
    F, A = feats.shape[1], mask.shape[1]
    valid = a["would_ko_valid"]
    x = np.zeros((rows_pad, F + A + 1), np.float32)
    x[:R, :F] = feats
    np.multiply(a["would_ko"], valid[:, None], out=x[:R, F : F + A])  # would-KO where valid, else 0
    x[:R, -1] = valid
    row_lane = np.zeros(rows_pad, np.int32)
    row_dec = np.zeros(rows_pad, np.int32)
    row_lane[:R], row_dec[:R] = mb.row_lane, mb.row_dec
    # the first row of each decision feeds the memory; rows are grouped by (lane, decision)
    slot = mb.row_lane.astype(np.int64) * T + mb.row_dec  # (lane, decision) slot of each row
    first = np.empty(R, bool)
    first[:1] = True
    np.not_equal(slot[1:], slot[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    first_row = np.zeros(Lp * T, np.int32)
    first_row[slot[starts]] = starts
    first_row = first_row.reshape(Lp, T)
    offered = "option_features" in a  # a game whose decisions offer options, each with a vector: the option head
    if offered:
        # what a lane chose at each decision: the picked options' vectors, summed over its rows (its picks)
        opts = a["option_features"].reshape(R, A, -1)
        picked = opts[np.arange(R), a["label"]]  # [R, O]
        label_hot = np.zeros((Lp, T, opts.shape[2]), np.float32)
        np.add.at(label_hot, (mb.row_lane, mb.row_dec), picked)
    else:
        # how many of a decision's rows chose each action: counts, exact in float32 (as adding 1.0 per row is)
        label_hot = np.bincount(slot * A + a["label"], minlength=Lp * T * A).astype(np.float32).reshape(Lp, T, A)
    lane_decisions = np.zeros(Lp, np.int32)
    lane_decisions[:L] = mb.lane_decisions

    def pad(v, fill=0):
        out = (
            np.zeros((rows_pad,) + v.shape[1:], dtype=v.dtype)
            if not fill
            else np.full((rows_pad,) + v.shape[1:], fill, v.dtype)
        )
        out[:R] = v
        return out

    # the row-level float targets: rows of one zeroed block (one allocation), each its own contiguous array
    weight, early, aux_valid, *aux = np.zeros((7, rows_pad), np.float32)
    weight[:R] = 1.0
    early[:R] = (mb.lane_dec_start[mb.row_lane] + mb.row_dec) < EARLY_DECISIONS
    aux_valid[:R] = a["aux_valid"]
    for k, out in zip(AUX_TARGETS, aux):
        out[:R] = a[k]
    targets = {
        "action_mask": pad(mask, True),
        "label": pad(a["label"]),
        "row_weight": weight,
        "row_early": early,
        "aux_valid": aux_valid,
        **dict(zip(AUX_TARGETS, aux)),
    }
    inputs = {
        "x": x,
        "row_lane": row_lane,
        "row_dec": row_dec,
        "first_row": first_row,
        "label_hot": label_hot,
        "lane_decisions": lane_decisions,
    }
    if offered:
        inputs["options"] = pad(opts)
        inputs["pick"] = pad(a["label"].astype(np.int32))
        targets.update(option_targets(a, weight, R, pad))
    return Prepared(mb.index, R, L, mb.lane_ids, mb.lane_fresh, inputs, targets)


def option_targets(a: dict, weight: np.ndarray, R: int, pad) -> dict:
    """The option head's targets (docs/real-game.md#rows): ``policy_weight``, each row's weight in the policy
    loss (0 where one option was left: the row teaches no choice, though it still moves the memory and
    trains the aux heads); ``stop_target``, 1 where the agent stopped after this row's pick (``substep + 1 ==
    picks``); ``stop_valid``, 1 where stopping there was its choice: at least ``min_count`` picked, fewer than
    ``max_count``, and options left (one offered besides this pick)."""
    after = a["substep"].astype(np.int64) + 1  # picks made once this row's is
    left = a["action_mask"].sum(axis=1) > 1
    valid = (after >= a["min_count"]) & (after < a["max_count"]) & left
    policy = weight.copy()
    policy[:R] *= ~a["single_option"]
    return {
        "policy_weight": policy,
        "stop_target": pad((after == a["picks"]).astype(np.float32)),
        "stop_valid": pad(valid.astype(np.float32)),
    }
