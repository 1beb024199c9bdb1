"""``learn.batch.prepare`` against its definition, written out row by row.

``prepare`` is vectorised for speed (it runs once per microbatch beside the step); here each of its arrays is
rebuilt the plain way from the microbatch's rows, on microbatches that hold what the fast paths must get right:
decisions of several rows, rows of one decision choosing the same action (counted twice), lanes of one decision,
padding lanes and rows, chunks that start mid-lane (their early rows), invalid would-KO values.
"""

from __future__ import annotations

import numpy as np
import pytest

from tcgexp.learn.batch import EARLY_DECISIONS, bucket, prepare
from tcgexp.plan.loader import Batch
from tcgexp.plan.plan import Microbatch

F, A = 7, 5


def microbatch(rng: np.random.Generator, lanes: int, most: int, rows_per_decision: int) -> Batch:
    decisions = rng.integers(1, most + 1, lanes)
    decisions[rng.integers(lanes)] = most
    row_lane, row_dec = [], []
    for lane, n in enumerate(decisions.tolist()):
        for d in range(n):
            k = int(rng.integers(1, rows_per_decision + 1))
            row_lane += [lane] * k
            row_dec += [d] * k
    R = len(row_lane)
    start = rng.integers(0, 12, lanes).astype(np.int32)  # chunks that start mid-lane
    start[0] = 0
    label = rng.integers(0, A, R).astype(np.int32)
    label[1::3] = label[::3][: len(label[1::3])]  # neighbours (often one decision's rows) choosing alike
    mb = Microbatch(
        index=3,
        keys=((0, 0),),
        take={},
        row_lane=np.array(row_lane, np.int32),
        row_dec=np.array(row_dec, np.int32),
        row_ids=np.arange(R, dtype=np.int64),
        lane_ids=rng.permutation(100)[:lanes].astype(np.int64),
        lane_fresh=start == 0,
        lane_decisions=decisions.astype(np.int32),
        lane_dec_start=start,
    )
    arrays = {
        "features": rng.normal(size=(R, F)).astype(np.float32),
        "action_mask": rng.random((R, A)) < 0.7,
        "label": label,
        "would_ko": rng.normal(size=(R, A)).astype(np.float32),
        "would_ko_valid": rng.random(R) < 0.5,
        "aux_ko": rng.normal(size=R).astype(np.float32),
        "aux_prize_delta": rng.normal(size=R).astype(np.float32),
        "aux_terminal": rng.normal(size=R).astype(np.float32),
        "aux_return": rng.normal(size=R).astype(np.float32),
        "aux_valid": rng.random(R) < 0.5,
    }
    return Batch(mb, arrays)


def by_rows(batch: Batch, rows_pad: int, decisions_pad: int) -> dict:
    """Every array of ``prepare``, one row at a time."""
    mb, a = batch.mb, batch.arrays
    R = mb.rows
    most = int(mb.lane_decisions.max())
    Lp, T = bucket(mb.lanes), min(bucket(most), max(decisions_pad, most))
    x = np.zeros((rows_pad, F + A + 1), np.float32)
    first_row = np.zeros((Lp, T), np.int32)
    label_hot = np.zeros((Lp, T, A), np.float32)
    seen = set()
    want = {k: np.zeros(rows_pad, np.float32) for k in ("row_weight", "row_early", "aux_valid")}
    aux = {k: np.zeros(rows_pad, np.float32) for k in ("aux_ko", "aux_prize_delta", "aux_terminal", "aux_return")}
    mask, label = np.ones((rows_pad, A), bool), np.zeros(rows_pad, np.int32)
    for r in range(R):
        lane, d = int(mb.row_lane[r]), int(mb.row_dec[r])
        x[r, :F] = a["features"][r]
        valid = np.float32(a["would_ko_valid"][r])
        x[r, F : F + A] = a["would_ko"][r] * valid  # (a negative value times 0 is -0.0: the same bits as prepare)
        x[r, -1] = valid
        if (lane, d) not in seen:
            seen.add((lane, d))
            first_row[lane, d] = r
        label_hot[lane, d, a["label"][r]] += 1.0
        want["row_weight"][r] = 1.0
        want["row_early"][r] = float(mb.lane_dec_start[lane] + d < EARLY_DECISIONS)
        want["aux_valid"][r] = float(a["aux_valid"][r])
        for k, out in aux.items():
            out[r] = a[k][r]
        mask[r], label[r] = a["action_mask"][r], a["label"][r]
    row_lane, row_dec = np.zeros(rows_pad, np.int32), np.zeros(rows_pad, np.int32)
    row_lane[:R], row_dec[:R] = mb.row_lane, mb.row_dec
    lane_decisions = np.zeros(Lp, np.int32)
    lane_decisions[: mb.lanes] = mb.lane_decisions
    inputs = {"x": x, "row_lane": row_lane, "row_dec": row_dec, "first_row": first_row, "label_hot": label_hot}
    return {**inputs, "lane_decisions": lane_decisions, "action_mask": mask, "label": label, **want, **aux}


@pytest.mark.parametrize(
    ("lanes", "most", "rows_per_decision", "decisions_pad"),
    [(1, 1, 1, 16), (3, 4, 3, 16), (5, 9, 2, 4), (9, 16, 4, 16), (17, 3, 1, 32)],
    ids=["one-row", "multi-row-decisions", "chunk-past-pad", "full-chunk", "lanes-past-bucket"],
)
def test_prepare_equals_its_row_by_row_definition(lanes, most, rows_per_decision, decisions_pad):
    rng = np.random.default_rng(lanes * 100 + most)
    for _ in range(5):
        batch = microbatch(rng, lanes, most, rows_per_decision)
        rows_pad = batch.mb.rows + int(rng.integers(0, 9))
        got = prepare(batch, rows_pad=rows_pad, decisions_pad=decisions_pad)
        want = by_rows(batch, rows_pad, decisions_pad)
        arrays = {**got.inputs, **got.targets}
        assert arrays.keys() == want.keys()
        for k, v in want.items():
            assert arrays[k].dtype == v.dtype and arrays[k].shape == v.shape, k
            assert arrays[k].tobytes() == v.tobytes(), k
        assert (got.rows, got.lanes, got.index) == (batch.mb.rows, batch.mb.lanes, 3)


def test_a_microbatch_over_the_row_budget_is_refused_naming_it():
    batch = microbatch(np.random.default_rng(0), 4, 4, 2)
    with pytest.raises(ValueError, match=f"microbatch 3 has {batch.mb.rows} rows, more than the row budget 2"):
        prepare(batch, rows_pad=2, decisions_pad=16)
