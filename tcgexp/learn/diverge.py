"""The divergence guard: a run that produced a non-finite number stops there, loudly.

Checked at every microbatch (loss and each loss part), at every optimizer update
(the gradient norm, before clipping) and at every validation. The run stops at
that optimizer step with one line naming the epoch, the step, the quantity and
the knobs that usually cause it; nothing is checkpointed from the weights that
step produced (``latest/`` keeps the last finite checkpoint, so a resume with a
smaller learning rate is possible), and the process exits non-zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


class DivergenceError(RuntimeError):
    """Training produced NaN or infinity."""


def first_non_finite(values: Mapping[str, Any], keys: Iterable[str] | None = None) -> tuple[str, float] | None:
    for k in keys if keys is not None else values:
        v = values[k]
        if v is not None and not math.isfinite(float(v)):
            return k, float(v)
    return None


def check(values: Mapping[str, Any], *, where: str, hint: str, keys: Iterable[str] | None = None) -> None:
    """Raise DivergenceError if any of `values` (restricted to `keys`) is NaN or infinite."""
    bad = first_non_finite(values, keys)
    if bad is not None:
        name, value = bad
        raise DivergenceError(
            f"training diverged at {where}: {name} is {value}. Nothing was checkpointed from these weights; "
            f"latest/ keeps the last finite checkpoint, if one was written. The knobs that usually cause it: "
            f"{hint}; lower the learning rate or the aux weight, or clip gradients (grad_clip > 0), then "
            "start again or resume= from latest/"
        )


def strict(obj: Any) -> Any:
    """A JSON-ready copy with every NaN or infinity replaced by None (strict JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj
