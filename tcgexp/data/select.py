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
from collections.abc import Callable, Sequence

from .catalog import Catalog
from .errors import DataError, listed

MAX_DAYS = 36500  # at most 100 years in one corpus, as dataset.days allows: a selection is counted, not listed


def parse(key: str, value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError as exc:
        raise DataError(f"{key}={value!r} is not an ISO date", fix="use YYYY-MM-DD") from exc


def selected_dates(
    dates: Sequence[str] | None, date_from: str | None, date_to: str | None, catalog: Callable[[], Catalog]
) -> list[str] | None:
    """The selected days in date order, or None when the config selects none (start_date + days).

    Counted before anything is listed: a range of any size is refused at once when it holds more
    than MAX_DAYS days (or, for a selection that must already be built, ``check_count``). `catalog`
    makes the catalog, which only an open range needs (a refusal writes nothing).
    """
    if dates is not None and len(dates) == 0:
        raise DataError(
            "dataset.dates=[] selects no day",
            fix="list the days (dataset.dates=[2026-07-27,...]), or leave dataset.dates unset "
            "(null) to use dataset.start_date and dataset.days",
        )
    if dates and (date_from or date_to):
        raise DataError(
            "dataset.dates and dataset.date_from/date_to both select days", fix="give either a list of dates or a range"
        )
    if dates:
        days = sorted({parse("dataset.dates", d) for d in dates})
        too_many("dataset.dates", len(days))
        return [d.isoformat() for d in days]
    if not (date_from or date_to):
        return None
    lo = parse("dataset.date_from", date_from) if date_from else None
    hi = parse("dataset.date_to", date_to) if date_to else None
    if lo is not None and hi is not None:
        check_range(lo, hi)  # before the catalog is read: a range that cannot be is refused at once
    if lo is None or hi is None:
        found = catalog()
        built = [r["date"] for r in found.all()]
        if not built:
            raise DataError(
                "an open date range needs built days, and the catalog has none",
                path=found.path,
                fix="build days first (python -m tcgexp.data) or give both dataset.date_from and date_to",
            )
        lo = lo or parse("catalog", built[0])
        hi = hi or parse("catalog", built[-1])
        check_range(lo, hi)
    return [(lo + dt.timedelta(days=i)).isoformat() for i in range((hi - lo).days + 1)]


def check_range(lo: dt.date, hi: dt.date) -> None:
    if hi < lo:
        raise DataError(f"dataset.date_to={hi} is before dataset.date_from={lo}")
    too_many(f"dataset.date_from={lo} .. dataset.date_to={hi}", (hi - lo).days + 1)


def too_many(what: str, count: int) -> None:
    if count > MAX_DAYS:
        raise DataError(
            f"{what} selects {count:,} days; a corpus holds at most {MAX_DAYS:,} (100 years)",
            fix="narrow the selection to the days you mean",
        )


def check_count(dates: Sequence[str], catalog: Catalog) -> None:
    """A selection of built days cannot hold more days than the catalog: refused before any day is looked at."""
    have = catalog.all()
    if len(dates) > len(have):
        span = f"{have[0]['date']}..{have[-1]['date']}" if have else "none"
        missing = [d for d in dates if d not in {r["date"] for r in have}]
        raise DataError(
            f"the selection holds {len(dates):,} days, the catalog {len(have):,} ({span}); not built: "
            f"{listed(missing)}",
            path=catalog.path,
            fix="select built days, or build them with python -m tcgexp.data and the same selection",
        )


def check_built(dates: Sequence[str], fingerprints: Sequence[str], catalog: Catalog, diffs) -> None:
    """Refuse, in one line, selected days that are not built or were built with other settings."""
    have = {r["date"]: r for r in catalog.all()}
    missing = [d for d in dates if d not in have]
    other = [d for d, fp in zip(dates, fingerprints) if d in have and have[d]["fingerprint"] != fp]
    if missing or other:
        parts = ([f"not built: {listed(missing)}"] if missing else []) + (
            [f"built with other settings: {listed([f'{d} ({diffs(d)})' for d in other[:3]] + other[3:], 3, '; ')}"]
            if other
            else []
        )
        span = f"{min(have)}..{max(have)}" if have else "none"
        raise DataError(
            f"selected days {'; '.join(parts)} (catalog has {len(have)} days: {span})",
            path=catalog.path,
            fix="build them with python -m tcgexp.data and the same dataset "
            "settings and selection, or select built days",
        )
