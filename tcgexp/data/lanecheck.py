"""Lane checks shared by the builder, the validator and the planner.

A lane is one (episode_id, side). Inside it, rows appear in decision order and
step_id runs 0, 1, 2, ... with repeats only for consecutive rows of one
multi-select decision. Anything else (a gap, a step that comes back later, a
lane that does not start at 0) is an error naming the lane.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import DataError


def lane_order(episode_id: np.ndarray, side: np.ndarray) -> np.ndarray:
    """Row indices grouped by lane, row order kept inside each lane (stable)."""
    return np.lexsort((side, episode_id))


def check_lanes(
    episode_id: np.ndarray,
    side: np.ndarray,
    step_id: np.ndarray,
    decision_id: np.ndarray | None = None,
    *,
    path: Path | str | None = None,
    row_group: int | None = None,
) -> None:
    """Raise DataError naming the first bad lane; vectorised over all rows."""
    n = len(step_id)
    if n == 0:
        return
    order = lane_order(episode_id, side)
    ep, sd, st = episode_id[order], side[order], step_id[order].astype(np.int64)
    starts = np.ones(n, dtype=bool)
    starts[1:] = (ep[1:] != ep[:-1]) | (sd[1:] != sd[:-1])
    step = np.diff(st, prepend=0)
    bad_start = starts & (st != 0)
    bad_step = ~starts & (step != 0) & (step != 1)
    bad = bad_start | bad_step
    if decision_id is not None:
        # rows that repeat a step must be the same decision (a multi-select)
        dec = decision_id[order]
        same_step_other_decision = ~starts & (step == 0) & (np.diff(dec, prepend=dec[0]) != 0)
        bad |= same_step_other_decision
    if bad.any():
        i = int(np.argmax(bad))
        lane = (int(ep[i]), int(sd[i]))
        if bad_start[i]:
            what = f"lane starts at step_id {int(st[i])}, expected 0"
        elif bad_step[i] and step[i] > 1:
            what = f"step_id jumps from {int(st[i - 1])} to {int(st[i])} (gap)"
        else:
            what = (
                f"step_id {int(st[i])} repeats non-contiguously (after {int(st[i - 1])})"
                if step[i] != 0
                else f"step_id {int(st[i])} is shared by two different decisions"
            )
        raise DataError(
            what,
            path=path,
            row_group=row_group,
            lane=lane,
            fix="the replay or encoder produced a broken lane; rebuild this day from its ZIP",
        )
