"""The jobs (trials) a sweep's report could not read as they ended, one line each, saying what the findings rest on.

Why: a halving sweep whose best trial's folder was deleted, or whose result.json was truncated, was reported as if
whole: the finding named the trial and its value, and one combined line said the trials were "none counted as
completed" while the finding used them. A halving trial's value comes from the study (the sweeper's record,
``trials.json``, drawn from its storage), not from its folder: when the study still holds it, the line says the value
came from there; otherwise the trial is left out and the findings rest on the rest. The same line goes to the
console, to summary.md under the findings and to findings.json (``unread`` in each finding).
"""

from __future__ import annotations

import math


def unreadable_rows(rows: list[dict]) -> list[dict]:
    """The jobs (or trials) the report could not read as a result: a folder gone, a result.json that does not
    read, a completed run without a finite value."""
    return [r for r in rows if r["status"] in ("MISSING", "DAMAGED", "NAN")]


def study_value(row: dict) -> float | None:
    """A halving trial's value as the study recorded it, or None (a grid job has none)."""
    value = row.get("value")
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def case_lines(rows: list[dict], trials: dict) -> list[str]:
    """One line per job (trial) not read as it ended, the best trial first: which, what is gone or damaged, and
    what the findings rest on instead."""
    bad = sorted(unreadable_rows(rows), key=lambda r: not r.get("best"))
    what = "trial" if trials else "job"
    rest = len(rows) - len(bad)
    out = []
    for r in bad:
        who = f"{'the best, ' if r.get('best') else ''}{what} {r['job']}"
        value = study_value(r) if trials else None
        if value is not None:
            basis = (
                f"its {trials['metric']} {value:.6g} is the study's record (trials.json, from the sweep's study "
                "storage), not its own: the findings use that value; what only its folder held (its curve, rows/s, "
                "data stall) is left out"
            )
        else:
            basis = f"left out: the findings are based on the other {rest} {what}(s)"
        out.append(f"{who} cannot be read as it ended ({str(r['status']).lower()}): {r['error']}; {basis}")
    return out


def mark(found: list[dict], lines: list[str]) -> None:
    """Each finding carries the lines (findings.json): a reader of one finding learns what it does not rest on."""
    if lines:
        for f in found:
            f["unread"] = list(lines)


def markdown(lines: list[str]) -> list[str]:
    """summary.md's list of them, under the findings."""
    if not lines:
        return []
    return (
        ["Not read as they ended (the findings above say what they rest on instead):", ""]
        + [f"- {line}" for line in lines]
        + [""]
    )
