"""Choosing days: ``dataset.dates`` (a list) or ``dataset.date_from``/``date_to`` (a range), via the catalog.

Without either, a corpus is ``start_date`` plus ``days`` consecutive days, built
on demand. With a selection, a run trains on exactly the chosen days, which
must already be built with the current settings: the catalog says which days
exist, and a day that is missing or was built with other settings is named,
all in one line, instead of being built behind the run's back
(``python -m tcgexp.data`` with the same selection builds them).
"""
from __future__ import annotations

import datetime as dt
from typing import Optional, Sequence

from .catalog import Catalog
from .errors import DataError


def parse(key: str, value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError as exc:
        raise DataError(f"{key}={value!r} is not an ISO date", fix="use YYYY-MM-DD") from exc


def selected_dates(dates: Optional[Sequence[str]], date_from: Optional[str], date_to: Optional[str],
                   catalog: Catalog) -> Optional[list[str]]:
    """The selected days in date order, or None when the config selects none (start_date + days)."""
    if dates and (date_from or date_to):
        raise DataError("dataset.dates and dataset.date_from/date_to both select days",
                        fix="give either a list of dates or a range")
    if dates:
        days = sorted({parse("dataset.dates", d) for d in dates})
        return [d.isoformat() for d in days]
    if not (date_from or date_to):
        return None
    built = [r["date"] for r in catalog.all()]
    lo = parse("dataset.date_from", date_from) if date_from else (parse("catalog", built[0]) if built else None)
    hi = parse("dataset.date_to", date_to) if date_to else (parse("catalog", built[-1]) if built else None)
    if lo is None or hi is None:
        raise DataError("an open date range needs built days, and the catalog has none", path=catalog.path,
                        fix="build days first (python -m tcgexp.data) or give both dataset.date_from and date_to")
    if hi < lo:
        raise DataError(f"dataset.date_to={hi} is before dataset.date_from={lo}")
    return [(lo + dt.timedelta(days=i)).isoformat() for i in range((hi - lo).days + 1)]


def check_built(dates: Sequence[str], fingerprints: Sequence[str], catalog: Catalog, diffs) -> None:
    """Refuse, in one line, selected days that are not built or were built with other settings."""
    have = {r["date"]: r for r in catalog.all()}
    missing = [d for d in dates if d not in have]
    other = [f"{d} ({diffs(d)})" for d, fp in zip(dates, fingerprints) if d in have and have[d]["fingerprint"] != fp]
    if missing or other:
        parts = ([f"not built: {', '.join(missing)}"] if missing else []) + \
            ([f"built with other settings: {'; '.join(other)}"] if other else [])
        span = f"{min(have)}..{max(have)}" if have else "none"
        raise DataError(f"selected days {'; '.join(parts)} (catalog has {len(have)} days: {span})",
                        path=catalog.path, fix="build them with python -m tcgexp.data and the same dataset "
                        "settings and selection, or select built days")
