"""The names a run's tracker receives, and what each means: where the metrics reference reads them.

The trainer (``tracked_steps.py``) hands its tracker, at the optimizer steps its cadence selects,
``train/<metric>`` for each of the loss vector's ``METRICS`` (``losses.py``) with ``train/grad_norm``,
``lr`` and ``cache_train/<counter>`` for each of the train cache's counters; after each validation,
``val/<metric>``, the early/late split of the policy loss and accuracy, ``val/rows`` and
``cache_val/<counter>``. A model with the option head (a game whose decisions offer options: the real game)
adds its stop head's ``STOP_METRICS`` to the metrics. Meanings are written once, here (the cache's counters in
``tcgexp/cache/report.py``); ``names()`` refuses a name without one, and ``tests/test_reference.py``
holds a real run's tracked names to it both ways, on each head.
"""

from __future__ import annotations

from ..cache.policy import LruPolicy
from ..cache.report import MEANINGS as CACHE_MEANINGS
from ..cache.rowgroup import RowGroupCache
from ..learn.batch import EARLY_DECISIONS
from ..learn.losses import METRICS, STOP_METRICS

# each of the loss vector's entries (METRICS), tracked as train/<name> (the optimizer step's rows) and
# val/<name> (every validation row); all are means over rows, the aux losses over rows with aux targets
LOSSES = {
    "loss": (
        "the total the optimizer minimises: policy + trainer.aux_weight x the four aux losses (+ stop, the option "
        "head's); val/ with the option head: that sum of the val/ parts, each a mean over its own rows"
    ),
    "policy": "cross-entropy of the recorded action over the legal actions (nats per row)",
    "accuracy": "share of rows whose highest-scoring legal action is the recorded one",
    "aux_ko": "binary cross-entropy of the KO head: whether the acting side takes a prize this turn",
    "aux_prize_delta": "squared error of the prize head: own minus opponent prizes over the next turns, / 4",
    "aux_terminal": "binary cross-entropy of the terminal head: whether this is the lane's last decision",
    "aux_return": "squared error of the outcome head: +1 when the acting side wins, -1 when it loses",
    # the option head's (the real game): its policy parts above are over the rows with a choice to make (rows with
    # one option left teach none), the stop head's below over the rows where the agent chose whether to stop
    "stop": (
        "the option head's stop head (games whose decisions offer options): binary cross-entropy of stopping after "
        "the row's pick, over the rows where stopping was the agent's choice (at least the decision's minimum "
        "picked, fewer than its maximum, options left); added to loss with weight 1. val/: the mean over exactly "
        "those rows"
    ),
    "stop_accuracy": (
        "the option head's stop head: share of those rows where the stop head's choice (stop when its logit > 0) "
        "is the agent's"
    ),
}
STEP = {  # train/<name> beside the losses, each optimizer step
    "grad_norm": "global L2 norm of the update's gradients, before trainer.grad_clip scales them",
}
LR = "the learning rate the update used: optimizer.lr x the schedule at that step"
EARLY = f"each lane's first {EARLY_DECISIONS} decisions (where memory has the least to go on)"
VALIDATION = {  # val/<name> beside the losses, after each validation
    "policy_early": f"the policy loss over rows of {EARLY}",
    "policy_late": "the policy loss over the other rows",
    "accuracy_early": f"the accuracy over rows of {EARLY}",
    "accuracy_late": "the accuracy over the other rows",
    "rows": "validation rows evaluated: every row of the validation split, once",
}
# when each prefix is tracked, and in which Aim context
STEPS = "every trainer.track_every-th optimizer step, each epoch's last and a stopped run's last (context subset=train)"
WHEN = {
    "train/": STEPS,
    "lr": STEPS,
    "val/": "after each validation, i.e. each epoch's end (context subset=val)",
    "cache_train/": f"{STEPS}; each rank's own too in a distributed run (context rank=r)",
    "cache_val/": "after each validation (context subset=val); each rank's own too in a distributed run (rank=r)",
}


class UnexplainedName(LookupError):
    """A name the tracker receives with no meaning written for it."""


def cache_counters() -> list[str]:
    """The names of a row-group cache's counters: what a real (empty) cache reports."""

    cache = RowGroupCache(
        [],
        ["label"],
        policy=LruPolicy,
        capacity=1,
        high_watermark_pct=100.0,
        spill=False,
        spill_budget_bytes=0,
        opt_step_guard="pressure",
    )
    try:
        return list(cache.counters())
    finally:
        cache.close()


def names(options: bool | None = None) -> dict[str, tuple[str, str]]:
    """{tracked name: (what it means, when it is tracked)} for every name a run's tracker can receive: a run whose
    model has the action head (`options` False), the option head (True), or either (None: the reference page)."""

    def meaning(table: dict, key: str, where: str) -> str:
        if key not in table:
            raise UnexplainedName(f"{key!r} is tracked but has no meaning: add it to {where}")
        return table[key]

    out: dict[str, tuple[str, str]] = {}
    metrics = METRICS if options is False else METRICS + STOP_METRICS
    for key in (*metrics, *STEP):
        out[f"train/{key}"] = (meaning({**LOSSES, **STEP}, key, "tcgexp/train/tracked.py"), WHEN["train/"])
    out["lr"] = (LR, WHEN["lr"])
    for key in (*metrics, *VALIDATION):
        out[f"val/{key}"] = (meaning({**LOSSES, **VALIDATION}, key, "tcgexp/train/tracked.py"), WHEN["val/"])
    for key in cache_counters():
        explained = meaning(CACHE_MEANINGS, key, "MEANINGS in tcgexp/cache/report.py")
        out[f"cache_train/{key}"] = (explained, WHEN["cache_train/"])
        out[f"cache_val/{key}"] = (explained, WHEN["cache_val/"])
    return out
