"""The statistics a sweep's report and the halving sweeper share: a mean over replicates and its interval."""

from __future__ import annotations

import math


def mean_interval(values, level: float = 0.95) -> tuple[float, float | None]:
    """(mean, half width of its `level` confidence interval, Student's t); no interval from one value."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    from scipy.stats import t as student

    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(student.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)


def seeds_to_resolve(diffs, most: int, level: float = 0.95) -> int | None:
    """About how many seeds would give a `level` interval that excludes 0 for paired differences like `diffs`:
    the least n for which Student's t half width, with the spread `diffs` show, falls below their mean's size.
    None when the mean is 0 (no number of seeds resolves no difference); ``most + 1`` past `most`."""
    n = len(diffs)
    mean = math.fsum(diffs) / n
    if n < 2 or mean == 0:
        return None
    import numpy as np
    from scipy.stats import t as student

    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in diffs) / (n - 1))
    k = np.arange(2, most + 1)
    resolved = np.nonzero(student.ppf(0.5 + level / 2, k - 1) * sd / np.sqrt(k) < abs(mean))[0]
    return int(k[resolved[0]]) if resolved.size else most + 1
