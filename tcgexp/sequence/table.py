"""The sequence's answer: each day's canonical model against the day before's, better / within noise / worse.

Validation (every game): the phase's accuracy on its own day's held-out episodes against the day before's on
its own, a difference of two proportions with Newcombe's interval from each side's Wilson interval (rows of one
episode are not independent, so the interval is narrower than the truth: the days' held-out sets also differ).
Play (a game with an arena): each opponent's win rate against the day before's, the same way; against the day
before's model itself, the day's win rate and its Wilson interval against one half. A difference is "better"
or "worse" only where its 95 % interval excludes zero (one half), else "within noise". Written to
``<folder>/days.md`` and ``days.json`` and printed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..data.manifest import write_json_atomic
from ..winrate import wilson

TABLE = "days.md"
DATA = "days.json"


def difference(a: tuple[float, int], b: tuple[float, int]) -> tuple[float, float, float]:
    """(p_a - p_b, its 95 % interval) for two independent proportions (successes, trials): Newcombe's method 10."""
    (sa, na), (sb, nb) = a, b
    pa, pb = sa / na, sb / nb
    la, ua = wilson(sa, na)
    lb, ub = wilson(sb, nb)
    d = pa - pb
    return d, d - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2), d + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)


def verdict(lo: float, hi: float, centre: float = 0.0) -> str:
    return "better" if lo > centre else "worse" if hi < centre else "within noise"


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def day_rows(phases: list[dict]) -> list[dict]:
    """Each phase's figures and, from the second, its comparisons with the day before."""
    rows, before = [], None
    for p in phases:
        val = p.get("val") or {}
        row = {"day": p["day"], "window": p.get("window"), "weights": p.get("canonical_sha256", "")[:12]}
        if val:
            n = int(val.get("rows") or 0)
            row["val"] = {"loss": val.get("loss"), "accuracy": val.get("accuracy"), "rows": n}
            prev = (before or {}).get("val") or {}
            if prev.get("rows") and n:
                d, lo, hi = difference(
                    (val["accuracy"] * n, n), (prev["accuracy"] * int(prev["rows"]), int(prev["rows"]))
                )
                row["val"]["vs_day_before"] = {
                    "accuracy_difference": d,
                    "interval": [lo, hi],
                    "loss_difference": val["loss"] - prev["loss"],
                    "verdict": verdict(lo, hi),
                }
        plays = {}
        for name, t in (p.get("eval") or {}).items():
            games = int(t.get("games") or 0)
            if not games:
                continue
            entry = {"win_rate": t["win_rate"], "interval": list(t["interval"]), "games": games}
            if name == "previous":
                entry["verdict"] = verdict(*t["interval"], centre=0.5)
            else:
                was = ((before or {}).get("eval") or {}).get(name)
                if was and was.get("games"):
                    d, lo, hi = difference(
                        (t["win_rate"] * games, games), (was["win_rate"] * int(was["games"]), int(was["games"]))
                    )
                    entry["vs_day_before"] = {"difference": d, "interval": [lo, hi], "verdict": verdict(lo, hi)}
            plays[name] = entry
        if plays:
            row["eval"] = plays
        rows.append(row)
        before = p
    return rows


def markdown(rows: list[dict]) -> str:
    # in the order they were played (eval.opponents, then the day before's model)
    opponents = list(dict.fromkeys(o for r in rows for o in r.get("eval", {})))
    opponents = [o for o in opponents if o != "previous"] + (["previous"] if "previous" in opponents else [])
    head = ["day", "trained on", "val loss", "val accuracy", "vs the day before", *[f"vs {o}" for o in opponents]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        val = r.get("val") or {}
        cmp = val.get("vs_day_before")
        cells = [
            r["day"],
            ", ".join(r.get("window") or []),
            f"{val['loss']:.4f}" if val.get("loss") is not None else "-",
            f"{pct(val['accuracy'])} % of {val['rows']}" if val.get("accuracy") is not None else "-",
            (
                f"{cmp['verdict']}: accuracy {100 * cmp['accuracy_difference']:+.1f} pts "
                f"[{100 * cmp['interval'][0]:+.1f}, {100 * cmp['interval'][1]:+.1f}], loss {cmp['loss_difference']:+.4f}"
                if cmp
                else "(first day)"
            ),
        ]
        for o in opponents:
            e = r.get("eval", {}).get(o)
            if e is None:
                cells.append("-")
                continue
            lo, hi = e["interval"]
            text = f"{pct(e['win_rate'])} % [{pct(lo)}, {pct(hi)}] of {e['games']}"
            if "verdict" in e:
                text += f": {e['verdict']}"
            elif "vs_day_before" in e:
                v = e["vs_day_before"]
                text += f"; {v['verdict']} ({100 * v['difference']:+.1f} pts)"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_table(folder: Path, phases: list[dict]) -> str:
    """``days.md`` and ``days.json`` in `folder`; the text a person reads."""
    rows = day_rows(phases)
    text = (
        f"[sequence] {len(rows)} day(s) in {folder}; each day's canonical model against the day before's "
        "(95 % intervals; 'within noise' where an interval holds no difference):\n" + markdown(rows)
    )
    write_json_atomic(Path(folder) / DATA, {"days": rows})
    (Path(folder) / TABLE).write_text(text.split("\n", 1)[1] + "\n")
    return text


def read_rows(folder: Path) -> list[dict]:
    return json.loads((Path(folder) / DATA).read_text())["days"]
