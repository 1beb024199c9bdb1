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
