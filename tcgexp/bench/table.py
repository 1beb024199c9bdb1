"""Markdown tables for benchmark output."""

from __future__ import annotations


def markdown_table(header: list[str], rows: list[list]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join(
        [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]]
    )


def root_override(args) -> list[str]:
    """``dataset.root=...`` when the benchmark was given ``--root``; else the dataset option's own root. Then the
    dataset settings it was given (``--dataset-set days=30``, where it takes them)."""
    root = [f"dataset.root={args.root}"] if getattr(args, "root", None) else []
    return root + [f"dataset.{kv}" for kv in getattr(args, "dataset_set", None) or []]
