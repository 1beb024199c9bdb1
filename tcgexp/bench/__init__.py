"""Benchmarks: ``python -m tcgexp.bench <name>`` prints a Markdown table.

Figures are measured side by side in one run; they go, with the command, into
the README. Nothing here is a timed test.
"""
