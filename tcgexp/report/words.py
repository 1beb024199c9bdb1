"""A sweep's findings in words: a sentence per row (the console's last lines), summary.md's opening section.

The rows are ``findings.py``'s comparisons as ``sweep_findings.py`` places them: the best option (with
the options tied with it bit for bit, folded into its name) against each other option, a metric the
same for every option in one row, an option whose every job failed as a row of its own, and the knobs
the options differ in that were not swept (``confounded``), said once per key.
"""

from __future__ import annotations

from .findings import (
    DIVERGED,
    EXACT,
    FAILED,
    IDENTICAL,
    INTERLEAVED,
    METHOD,
    MOST_SEEDS,
    NO_INTERVAL,
    NOISE,
    SEEDS_TO_ADD,
    THROUGHPUT,
)


def fmt(value, unit: str = "", signed: bool = False) -> str:
    """A finding's number as people read it: 4 significant digits, thousands separated, its unit."""
    if value is None:
        return "n/a"
    sign = "+" if signed else ""
    if value == 0:
        text = "0"
    elif abs(value) >= 1000:
        text = f"{value:{sign},.0f}"
    else:
        text = f"{value:{sign}.4g}"
    if not unit:
        return text
    if unit == "%":  # a difference of percentages is in percentage points
        return f"{text} pp" if signed else text + unit
    return f"{text} {unit}"


def interval_text(row: dict) -> str:
    if row["interval"] is None:
        return ""
    lo, hi = row["interval"]
    return f"[{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]"


def what(row: dict) -> str:
    return row.get("key") or row.get("configuration") or ""


def best_of(row: dict) -> str:
    """The better side's name: the best option, and those tied with it bit for bit (``lru = plan``)."""
    return " = ".join([row["best"], *row.get("ties", [])])


def vs_of(row: dict) -> str:
    return f"{row['vs']}{' (default)' if row.get('vs_is') == 'default' else ''}"


def seeds_note(row: dict) -> str:
    """How many seeds stand behind the row, and how many a failed job took away."""
    n = f"{row['n']} seed{'s' if row['n'] != 1 else ''}"
    n += f", {row['removed']} removed by failed jobs" if row.get("removed") else ""
    left = row.get("left_out") or []
    return n + (f"; left out, every job failed: {', '.join(left)}" if left else "")


def to_resolve(row: dict) -> str:
    """Within noise: about how many seeds would resolve a difference of the size seen, "" otherwise."""
    k = row.get("seeds_to_resolve")
    if row["verdict"] != NOISE:
        return ""
    if k is None:
        return "no number of seeds resolves it: the mean difference is 0"
    many = f"more than {MOST_SEEDS}" if k > MOST_SEEDS else f"about {k}"
    throughput = row["metric"] in {m.name for m in THROUGHPUT}
    # a grid's jobs can be run seed by seed (a halving sweep decides its order itself): advised when they were not
    order = f", run interleaved ({INTERLEAVED})" if throughput and row.get("key") and not row.get("interleaved") else ""
    return f"{many} seeds would resolve a difference this size{order}"


def failure(row: dict) -> str:
    """An option none of whose jobs completed: how many failed (or diverged), and where it ranks."""
    done = f"{row['vs']}: {row['verdict']} in {row['failed']} of {row['jobs']} {row['counted']}"
    if row["best"] is None:
        return f"{what(row)}: {done} (no option of {what(row)} completed)"
    return f"{what(row)}: {done}, ranked below every option that completed (best on {row['metric']}: {row['best']})"


SAME_POLICY = "the same weights in every seed, so one policy: its games' luck is no effect"


def bit_for_bit(row: dict) -> str:
    """How an identical row is identical: its values bit for bit, or (a win rate) the policy that played."""
    return SAME_POLICY if row.get("same_policy") else "bit for bit"


def sentence(row: dict) -> str:
    """One finding: `best` vs `vs`, the difference (and relative), its interval and n, the verdict."""
    if row["verdict"] in (FAILED, DIVERGED):
        return failure(row)
    if row.get("same_for_all"):  # a metric the key's options cannot tell apart: said once, for all of them
        options = [row["best"], *row["ties"]]
        if len(options) == 2:  # two options: the plain pair reads best
            head = f"{what(row)}, {row['metric']}: {options[0]} vs {options[1]}"
            if row["verdict"] == IDENTICAL:
                return f"{head}: identical, {bit_for_bit(row)} ({seeds_note(row)})"
            return f"{head}: {fmt(0, row['unit'], signed=True)}, exact: the same in every seed ({seeds_note(row)})"
        if row["verdict"] == IDENTICAL:
            return (
                f"{what(row)}, {row['metric']}: identical across all {len(options)} options ({', '.join(options)}), "
                f"{bit_for_bit(row)} ({seeds_note(row)})"
            )
        return (
            f"{what(row)}, {row['metric']}: the same for all {len(options)} options ({', '.join(options)}) in every "
            f"seed, {fmt(row['best_value'], row['unit'])}, exact ({seeds_note(row)})"
        )
    head = f"{what(row)}, {row['metric']}: {best_of(row)} vs {vs_of(row)}"
    if row["verdict"] == IDENTICAL:
        return f"{head}: identical, {bit_for_bit(row)} ({seeds_note(row)})"
    diff = fmt(row["difference"], row["unit"], signed=True)
    rel = f" ({row['relative_pct']:+.1f} %)" if row.get("relative_pct") is not None and row["unit"] != "%" else ""
    if row["verdict"] == EXACT:
        return f"{head}: {diff}{rel}, exact: the same in every seed ({seeds_note(row)})"
    if row["verdict"] == NO_INTERVAL:
        return f"{head}: {diff}{rel}, no interval ({seeds_note(row) if row['n'] else 'no seed completed both'})"
    more = to_resolve(row)
    return f"{head}: {diff}{rel}, 95 % {interval_text(row)} ({seeds_note(row)}): {row['verdict']}" + (
        f"; {more}" if more else ""
    )


def confounds(found: list[dict]) -> list[str]:
    """Once per key: the knobs its options differ in that were not swept (``confounded``), with each option's
    value, so that no difference is credited to the option alone without a word."""
    out, said = [], set()
    for r in found:
        knobs = r.get("confounded") or {}
        if not knobs or r.get("key") in said:
            continue
        said.add(r["key"])
        parts = []
        for knob, by_option in knobs.items():
            groups: dict[str, list[str]] = {}
            for option, value in by_option.items():
                groups.setdefault(value, []).append(option)
            shown = "; ".join(", ".join(options) + f": {value}" for value, options in groups.items())
            parts.append(f"{knob} ({shown})")
        out.append(
            f"{r['key']}: confounded: its options also differ in knobs that were not swept, {', '.join(parts)}; "
            "part of any difference above may be theirs (sweep the knob, or set it alike for every option)"
        )
    return out


HOW_TO_READ = (
    "How to read: for each key and metric the best option (`best`, with any option tied with it bit for bit: "
    "`lru = plan`) is compared with every other option (`vs`; the runner-up first, the default marked), so every "
    "option is placed: beaten (`better`, or `exact` with a difference), or not told apart from the best (`within "
    "noise`, `no interval`); a metric that is the same for every option is one row. `best − vs` is in the "
    "metric's units, so its sign follows the metric's direction. Seeds are replicates: differences are taken "
    f"seed by seed and summarised with a 95 % interval ({METHOD}). "
    "Verdicts: `exact`: every seed gave each option the same value (a deterministic counter), so the "
    "difference needs no interval; `identical`: bit-identical values seed by seed (the option cannot change "
    "this metric; a win rate: the options trained bit-identical weights in every seed, so one policy played, "
    "whatever luck its games had); "
    "`better`: the interval excludes 0; `within noise`: it includes 0, so the sweep cannot tell the two apart, and "
    "the row says about how many seeds would resolve a difference of the size seen (from the spread of the "
    f"per-seed differences; for rows/s and data stall run the seeds interleaved, `{INTERLEAVED}`, so the order "
    "the jobs ran in is no bias); "
    "`no interval`: one seed, so nothing says whether the difference is more than noise; `failed`, `diverged`: "
    "none of the option's jobs completed, so it ranks below every option that did."
)


def cells_of(r: dict, kind: str) -> list[str]:
    """A row of summary.md's findings table."""
    if r["verdict"] in (FAILED, DIVERGED):
        return [
            what(r),
            f"{r['metric']} ({r['direction']})",
            f"{r['best']}: {fmt(r['best_value'], r['unit'])}" if r["best"] is not None else "(none completed)",
            f"{r['vs']}: {r['verdict']} in {r['failed']} of {r['jobs']} {r['counted']}",
            "",
            "",
            "0",
            f"**{r['verdict']}** (ranked last)",
        ]
    if r.get("same_for_all"):
        options = [r["best"], *r["ties"]]
        best = (
            " = ".join(options) if len(options) == 2 else f"all {len(options)} options ({', '.join(options)})"
        ) + ": "
        best += fmt(r["best_value"], r["unit"]) if r["verdict"] == EXACT else bit_for_bit(r)
        vs = ""
    else:
        best = f"{best_of(r)}: {fmt(r['best_value'], r['unit'])}"
        vs = f"{vs_of(r)}: {fmt(r['vs_value'], r['unit'])}"
    more = to_resolve(r)
    return [
        what(r),
        f"{r['metric']} ({r['direction']})",
        best,
        vs,
        "" if r.get("same_for_all") else fmt(r["difference"], r["unit"], signed=True),
        interval_text(r),
        str(r["n"])
        + (f" ({r['removed']} removed by failed jobs)" if r.get("removed") else "")
        + (f" (left out, every job failed: {', '.join(r['left_out'])})" if r.get("left_out") else ""),
        f"**{r['verdict']}**" + (f" ({more})" if more else ""),
    ]


def markdown(found: list[dict], kind: str, averaged: str = "", none: str = "") -> list[str]:
    """summary.md's findings section: a table (findings.json holds the same rows), then how to read it.
    `none`: what to say when there is no row (why none)."""
    lines = ["## Findings", ""]
    if not found:
        return lines + [none or "No comparison yet: at least two options (configurations) must have completed.", ""]
    head = [
        "key" if kind == "grid" else "configuration",
        "metric",
        "best",
        "vs",
        "best − vs",
        "95 % interval",
        "n (seeds)",
        "verdict",
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells_of(r, kind)) + " |")
    for line in confounds(found):
        key, _, said = line.partition(": ")
        lines += ["", f"**{key}**: {said}"]
    lines += ["", HOW_TO_READ + (" " + averaged if averaged else "")]
    rerun = next((r["rerun"] for r in found if r.get("rerun")), None)
    if rerun:
        lines += [
            "",
            f"Some rows have no interval: re-run the sweep with {SEEDS_TO_ADD} seeds (replicates) to get one:",
            "",
            "```bash",
            rerun,
            "```",
        ]
    return lines + [""]
