"""What a sweep's results compare: a grid's swept keys (read as a factorial ablation), a halving sweep's
best configuration against its runner-up (at equal budget). The statistics are ``findings.py``'s.

A grid: for each swept key (``seed`` is a replicate, never a key) and each metric that matters for it
(``findings.metrics_for``), its best option against the runner-up, and against the default option
(the sweep's base config's choice) when that was swept and is neither. An option's value for a seed
is its mean over every combination of the other swept keys, so each key's effect is averaged over the
others; a seed counts for a pair only when both options completed every combination in it (the rows
say how many seeds a failed job removed). A combination where every job failed is left out (``left_out``
names it), so one impossible value of another key does not take away every comparison.

A halving sweep: the best configuration against the runner-up (the best of the others at the highest
rung it reached), both at the highest rung both reached, seed by seed (``hydra.sweeper.seeds``). The
objective is the rung's own value; rows/s and data stall (when the space holds a cache or loader key)
the mean of the per-epoch values up to that rung. The caches' counters are not kept per epoch, and a
promoted trial's result.json holds its last segment's only, so they are not compared at equal budget.
"""

from __future__ import annotations

import math
from typing import Any

from .findings import DIVERGED, EXACT, FAILED, IDENTICAL, THROUGHPUT, Metric, compare, metrics_for, touches_data


def label(value: Any) -> str:
    """An option as the report names it: a float to 4 significant digits when that is the value exactly, else in
    full (1e-3 and 1.00001e-3 are two options, never merged by their rounding)."""
    if isinstance(value, float):
        short = f"{value:.4g}"
        return short if float(short) == value else repr(value)
    return str(value)


def short(value: Any) -> str:
    """A sampled value as a halving sweep's table shows it (4 significant digits: its trials are told apart by
    their numbers, not by their values)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def value_of(row: dict, metric: str) -> float | None:
    """`metric` of a completed job's row: a summary.csv column, or an ``optimized_metric`` name."""
    if row.get("status") != "COMPLETED":
        return None
    v = (row.get("metrics") or {}).get(metric) if "/" in metric else row.get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def cells_of(
    rows: list[dict], key: str, option: str, others: list[str], combos: list[tuple], metric: str, seeds: list
) -> dict:
    """{seed: [the option's value in each combination of the other keys]}, for the seeds where the option
    completed every combination."""
    found: dict[tuple, float] = {}
    for r in rows:
        if label(r["params"].get(key)) == option:
            v = value_of(r, metric)
            if v is not None:
                found[(tuple(label(r["params"].get(k)) for k in others), r.get("seed"))] = v
    cells = {}
    for s in seeds:
        values = [found.get((c, s)) for c in combos]
        if all(v is not None for v in values):
            cells[s] = values
    return cells


def layout(rows: list[dict], keys: list[str], key: str) -> tuple[list[str], list[tuple], list, list[str]]:
    """The design around `key`: (the other swept keys, their combinations, the seeds, `key`'s options)."""
    others = [k for k in keys if k != key]
    combos = sorted({tuple(label(r["params"].get(k)) for k in others) for r in rows})
    seeds = sorted({r.get("seed") for r in rows}, key=lambda s: (s is None, str(s)))
    options = sorted({label(r["params"][key]) for r in rows if key in r["params"]}, key=_order)
    return others, combos, seeds, options


def grid_findings(
    rows: list[dict], keys: list[str], defaults: dict[str, Any], optimized: Metric, extra: list[Metric] = ()
) -> list[dict]:
    """Per swept key: every metric's placement of the options (``place``), then the options none of whose jobs
    completed (``failures``), ranked below them. `extra`: metrics every key is compared on besides its own (the
    policy's win rates: a policy's metric, whatever the key)."""
    out = []
    for key in keys:
        others, combos, seeds, options = layout(rows, keys, key)
        if len(options) < 2:
            continue
        default = label(defaults[key]) if key in defaults else None
        best_objective = None
        for metric in [*metrics_for(key, optimized), *extra]:
            # a combination of the other keys where every job failed (an impossible value swept for another
            # key) says nothing of `key`: it is left out (and named) rather than taking every seed away
            kept = [
                c
                for c in combos
                if any(
                    value_of(r, metric.name) is not None and tuple(label(r["params"].get(k)) for k in others) == c
                    for r in rows
                )
            ]
            if not kept:
                continue
            cells = {o: cells_of(rows, key, o, others, kept, metric.name, seeds) for o in options}
            scored = [o for o in options if cells[o]]
            if len(scored) < 2:
                if metric is optimized and scored:
                    best_objective = scored[0]
                continue
            policies = {o: policies_of(rows, key, o, others, kept, metric.name, seeds) for o in options}
            placed = place(metric, scored, cells, default, policies)
            if metric is optimized:
                best_objective = placed[0]["best"]
            for row in placed:
                out.append(
                    {
                        "key": key,
                        **row,
                        "options": len(options),
                        "seeds": len(seeds) if seeds != [None] else 1,
                        "removed": (len(seeds) - row["n"]) if row["n"] else len(seeds),
                        "averaged_over": {k: len({c[i] for c in kept}) for i, k in enumerate(others)},
                        "left_out": [" ".join(f"{k}={v}" for k, v in zip(others, c)) for c in combos if c not in kept],
                    }
                )
        out += failures(rows, key, options, others, combos, seeds, optimized, best_objective)
    return out


def policies_of(
    rows: list[dict], key: str, option: str, others: list[str], combos: list[tuple], metric: str, seeds: list
) -> dict:
    """{seed: [the digest of the weights that played `metric`'s games, per combination]} for an option (empty
    for a metric no policy played)."""
    found: dict[tuple, str] = {}
    for r in rows:
        digest = (r.get("policy") or {}).get(metric)
        if digest and label(r["params"].get(key)) == option and value_of(r, metric) is not None:
            found[(tuple(label(r["params"].get(k)) for k in others), r.get("seed"))] = digest
    out = {}
    for s in seeds:
        digests = [found.get((c, s)) for c in combos]
        if all(d is not None for d in digests):
            out[s] = digests
    return out


def same(a: dict | None, b: dict | None) -> bool:
    """Both options played with bit-identical weights in every seed and combination both have (one at least)."""
    if not a or not b:
        return False
    seeds = [s for s in a if s in b]
    return bool(seeds) and all(a[s] == b[s] for s in seeds)


def tied(row: dict) -> bool:
    """The two options cannot be told apart at all: bit-identical, or the same exact value in every seed."""
    return row["verdict"] == IDENTICAL or (row["verdict"] == EXACT and row["difference"] == 0)


def place(
    metric: Metric, options: list[str], cells: dict, default: str | None, policies: dict | None = None
) -> list[dict]:
    """Every option placed on `metric`: the best (by its mean over seeds) against each other option, in rank
    order. Options tied with the best bit for bit are folded into its row (``ties``); a metric all options
    tie on is one row (``same_for_all``), said once. `policies`: {option: {seed: [digest of the weights that
    played, per combination]}} for a metric of the policy's games (``compare``'s ``same_policy``)."""
    sign = -1 if metric.higher else 1
    ranked = sorted(options, key=lambda o: sign * _mean([_mean(v) for v in cells[o].values()]))
    best, rest = ranked[0], ranked[1:]
    policies = policies or {}
    rows = {
        o: compare(metric, best, cells[best], o, cells[o], same_policy=same(policies.get(best), policies.get(o)))
        for o in rest
    }
    ties = [o for o in rest if tied(rows[o]) and rows[o]["best"] == best]
    if len(ties) == len(rest):
        first = rows[rest[0]]
        verdict = IDENTICAL if any(rows[o]["verdict"] == IDENTICAL for o in rest) else EXACT
        return [
            {
                **first,
                "best": best,
                "vs": ", ".join(rest),
                "ties": rest,
                "same_for_all": True,
                "n": min(rows[o]["n"] for o in rest),
                "verdict": verdict,
                "vs_is": "all",
            }
        ]
    out = []
    for o in rest:
        if o in ties:
            continue
        row = rows[o]
        role = "default" if o == default else ("runner-up" if not out else "other")
        # the paired seeds can rank a pair the other way round than the means over all seeds did: the
        # better of the two is named first all the same, and the ties stay with the best's own rows
        out.append({**row, "ties": ties if row["best"] == best else [], "vs_is": role})
    return out


FAILED_STATUSES = ("FAILED", "KILLED")


def failures(
    rows: list[dict],
    key: str,
    options: list[str],
    others: list[str],
    combos: list[tuple],
    seeds: list,
    optimized: Metric,
    best: str | None,
) -> list[dict]:
    """A row for each option of `key` none of whose jobs completed and all of whose jobs ended (failed, killed or
    diverged): how many, ranked below every option that completed (`best`: the best of those on the objective)."""
    out = []
    for o in options:
        mine = [r for r in rows if label(r["params"].get(key)) == o]
        failed = [r for r in mine if r.get("status") in FAILED_STATUSES]
        if not mine or len(failed) != len(mine):
            continue
        counted = "seeds" if len(combos) == 1 and seeds != [None] else "jobs"
        if counted == "jobs" and len(mine) == 1:
            counted = "job"
        out.append(
            {
                "key": key,
                "metric": optimized.name,
                "direction": optimized.direction,
                "unit": optimized.unit,
                "best": best,
                "vs": o,
                "best_value": None,
                "vs_value": None,
                "difference": None,
                "relative_pct": None,
                "interval": None,
                "n": 0,
                "verdict": DIVERGED if all(r.get("diverged") for r in failed) else FAILED,
                "vs_is": "failed",
                "failed": len(failed),
                "jobs": len(mine),
                "counted": counted,
                "error": failed[0].get("error") or "",
                "options": len(options),
                "seeds": len(seeds) if seeds != [None] else 1,
                "removed": 0,
                "averaged_over": {k: len({c[i] for c in combos}) for i, k in enumerate(others)},
                "left_out": [],
            }
        )
    return out


def unchanged(rows: list[dict], keys: list[str], key: str, metric: str) -> bool:
    """`key` cannot change `metric` here: wherever two or more of its options completed the same
    combination of the other keys with the same seed, their values are bit-identical (and one such
    place at least)."""
    others, _, _, _ = layout(rows, keys, key)
    places: dict[tuple, set] = {}
    for r in rows:
        v = value_of(r, metric)
        if v is not None and key in r["params"]:
            where = (tuple(label(r["params"].get(k)) for k in others), r.get("seed"))
            places.setdefault(where, set()).add((label(r["params"][key]), v))
    compared = [p for p in places.values() if len({o for o, _ in p}) > 1]
    return bool(compared) and all(len({v for _, v in p}) == 1 for p in compared)


def _order(option: str):
    """Numbers by value, then words by name."""
    try:
        return (0, float(option), "")
    except ValueError:
        return (1, 0.0, option)


def _mean(values) -> float:
    return math.fsum(values) / len(values)


def runner_up(trials: dict) -> dict | None:
    """The best of the other configurations at the highest rung any of them reached (failed ones aside)."""
    others = [
        t for t in trials["trials"] if t["number"] != trials["best"] and t["state"] != "failed" and t["seed_values"]
    ]
    if not others:
        return None
    top = max(int(max(t["seed_values"], key=int)) for t in others)
    at_top = [t for t in others if str(top) in t["seed_values"]]
    sign = -1 if trials["direction"] == "maximize" else 1
    return min(at_top, key=lambda t: (sign * _mean(t["seed_values"][str(top)]), t["number"]))


def per_epoch(history: list[dict], epochs: int, key: str) -> float | None:
    """The mean over the first `epochs` epochs of the train side's per-epoch `key` (rows/s, data stall)."""
    values = [h.get("train", {}).get(key) for h in history[:epochs]]
    if len(values) < epochs or any(not isinstance(v, (int, float)) for v in values):
        return None
    return _mean(values)


def halving_findings(trials: dict, rows: list[dict], optimized: Metric) -> list[dict]:
    """The best configuration against the runner-up at the highest rung both reached, per metric."""
    by_number = {r["job"]: r for r in rows}
    best = next((t for t in trials["trials"] if t["number"] == trials["best"]), None)
    other = runner_up(trials) if best is not None else None
    if other is None:
        return []
    budget = min(max(map(int, t["seed_values"])) for t in (best, other))
    names = {t["number"]: f"trial {t['number']} ({by_number[t['number']]['overrides']})" for t in (best, other)}
    metrics = [optimized, *(THROUGHPUT if any(touches_data(k) for k in trials["space"]) else ())]
    out = []
    for metric in metrics:
        cells = {}
        for t in (best, other):
            if metric is optimized:
                values = t["seed_values"][str(budget)]
            else:
                factor = 100.0 if metric.name == "data_stall_pct" else 1.0
                key = "data_stall_share" if metric.name == "data_stall_pct" else "rows_per_second"
                values = [per_epoch(h, budget, key) for h in by_number[t["number"]].get("histories") or []]
                values = [v * factor if v is not None else None for v in values]
            cells[t["number"]] = {i: [v] for i, v in enumerate(values) if v is not None}
        row = compare(
            metric, names[best["number"]], cells[best["number"]], names[other["number"]], cells[other["number"]]
        )
        at = f"{budget} epoch{'' if budget == 1 else 's'}"
        # the better of the two at this budget is named first: the sweep's best, or its runner-up when that
        # did better here (the best is chosen at full budget, on the objective)
        order = "best vs runner-up" if row["best"] == names[best["number"]] else "runner-up vs best"
        out.append(
            {
                "configuration": f"{order} at {at}",
                **row,
                "epochs": budget,
                "seeds": trials["seeds"],
                "removed": trials["seeds"] - row["n"],
            }
        )
    return out
