"""Every tcgexp command in the README and the docs pages composes as written (a renamed key or group fails here,
not for a user), and the cheap ones run.

Hydra apps run with ``--cfg job`` (compose and print, nothing trained; a sweep's first value of
each comma list, since ``--cfg`` cannot be combined with ``--multirun``); the benchmark CLI's
arguments go through its own parser. A bash block right after the line ``<!-- test: runs -->`` is
run as written, in a fresh folder: the page promises those commands work as they stand. A
placeholder (``<run dir>``) in a docs page's command is allowed only where the page says, outside
its commands, what to put there.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = {
    "tcgexp-train": "tcgexp.train",
    "tcgexp-data": "tcgexp.data",
    "tcgexp-replay": "tcgexp.bench.trace",
    "tcgexp-bench": "tcgexp.bench",
    "tcgexp-sequence": "tcgexp.cli.sequence",
}
RUNS = "<!-- test: runs -->"  # the next bash block's commands run in the tests, as written
# the pages a reader follows, each held to the placeholder rule (RELIABILITY.md, a record of faults tried, is
# read for its commands only)
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [*DOCS, ROOT / "RELIABILITY.md"]
PLACEHOLDER = re.compile(r"<[^<>]+>")
INLINE = re.compile(r"`((?:python -m tcgexp|tcgexp-)[^`]*)`")


def command_lines(text: str) -> list[tuple[str, bool]]:
    """(line, whether its block runs) for bash blocks' lines, then the inline `python -m tcgexp...` / `tcgexp-...`
    spans of the prose."""
    out = []
    for marker, block in re.findall(r"(" + re.escape(RUNS) + r"\s*\n)?```bash\n(.*?)```", text, re.DOTALL):
        out += [(ln, bool(marker)) for ln in block.replace("\\\n", " ").splitlines()]
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return out + [(span, False) for span in INLINE.findall(prose)]


def app_words(part: str) -> list[str]:
    """``[module, *args]`` when `part` (one command of a line) runs a tcgexp app, else []."""
    words = shlex.split(part, comments=True)
    if words[:1] in (
        ["mlx.launch"],
        ["tcgexp-launch"],
    ):  # <launcher> [its options] <app> ...: the app composes the same
        apps = [i for i, w in enumerate(words) if w in APPS]
        words = words[apps[0] :] if apps else []
    if words[:2] == ["python", "-m"] and words[2:3] and words[2].startswith("tcgexp"):
        return [words[2], *words[3:]]
    if words and words[0] in APPS:
        return [APPS[words[0]], *words[1:]]
    return []


def page_commands(page: Path) -> list[tuple[str, list[str], bool]]:
    """(page name, [module, *args], runs) for every tcgexp command of a page.

    Placeholders (`<run dir>`, `a|b`, `...`) and shell variables mark a span as a pattern, not a command: skipped
    (``test_placeholders_are_explained`` holds the docs' placeholders to the page's words).
    """
    out = []
    for line, runs in command_lines(page.read_text()):
        for part in line.split("&&"):
            if any(mark in part for mark in ("<", "|", "...", "$")):
                continue
            words = app_words(part)
            if words:
                out.append((str(page.relative_to(ROOT)), words, runs))
    return out


COMMANDS = [c for page in PAGES for c in page_commands(page)]


def test_the_pages_have_commands():
    assert len(COMMANDS) >= 20
    assert any(runs for _, _, runs in COMMANDS), f"no block marked {RUNS}: the cheap commands must run"


def is_app(part: str) -> bool:
    """Whether one command of a line runs a tcgexp app, placeholders and patterns read as plain words."""
    try:
        return bool(app_words(re.sub(r"\S*(\.\.\.|\|)\S*", "X", PLACEHOLDER.sub("X", part))))
    except ValueError:  # unbalanced quotes: not a command a reader could run either
        return False


def placeholders(page: Path) -> list[tuple[str, str]]:
    """(placeholder, the command holding it) of each tcgexp command in `page` that is a pattern."""
    return [
        (p, part.strip())
        for line, _ in command_lines(page.read_text())
        for part in line.split("&&")
        if is_app(part)
        for p in PLACEHOLDER.findall(part)
    ]


def unexplained(page: Path) -> list[str]:
    """Each placeholder of a page's commands that the page never mentions outside its commands."""
    text = page.read_text()
    words = INLINE.sub("", re.sub(r"```.*?```", "", text, flags=re.DOTALL))  # the page minus its commands
    return [f"{page.name}: {p} in `{cmd}`" for p, cmd in placeholders(page) if p not in words]


def patterns(page: Path) -> list[str]:
    """Commands of a page written as patterns a reader cannot run: an elision (`...`) or alternatives (`a|b`)."""
    return [
        part.strip()
        for line, _ in command_lines(page.read_text())
        for part in line.split("&&")
        if re.search(r"\.\.\.|\S\|\S", part) and is_app(part)
    ]


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_placeholders_are_explained(page):
    """A `<placeholder>` in a docs command only where the page says what goes there; no `...` or `a|b` patterns."""
    assert not unexplained(page), "say on the page what to put there:\n" + "\n".join(unexplained(page))
    assert not patterns(page), "write the whole command, or a <placeholder> the page explains:\n" + "\n".join(
        patterns(page)
    )


def test_an_unexplained_placeholder_or_a_pattern_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Resume a run:\n\n```bash\ntcgexp-train resume=<run dir>\ntcgexp-train cache=lru|fifo ...\n```\n")
    assert unexplained(page) == ["page.md: <run dir> in `tcgexp-train resume=<run dir>`"]
    assert patterns(page) == ["tcgexp-train cache=lru|fifo ..."]
    page.write_text(
        page.read_text() + "\n`<run dir>` is the folder the run printed, e.g. outputs/2026-07-27/10-00-00.\n"
    )
    assert unexplained(page) == []


def first_of_each_sweep(args: list[str]) -> list[str]:
    """Each sweep override at its first value: a comma list's first, choice()'s first, an interval's start."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, out = OverridesParser.create(), []
    for a in args:
        key, eq, value = a.partition("=")
        if eq and "(" in value and not key.startswith("hydra"):
            o = parser.parse_override(a)
            if o.is_sweep_override():
                first = o.value().start if o.is_interval_sweep() else next(iter(o.sweep_iterator()))
                out.append(f"{key}={first}")
                continue
        if eq and "," in value and not value.startswith(("[", "{", "'", '"')):
            value = value.split(",")[0]
        out.append(f"{key}{eq}{value}" if eq else a)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "page, command", [(p, c) for p, c, _ in COMMANDS], ids=[f"{p}: {' '.join(c)[:80]}" for p, c, _ in COMMANDS]
)
def test_command_composes(page, command, tmp_path):
    module, args = command[0], command[1:]
    if module not in APPS.values():
        pytest.skip(f"{module} is not a Hydra app or the benchmark CLI")
    if module == "tcgexp.bench" and not args:
        pytest.skip("the benchmark CLI named, not run (it needs a benchmark name)")
    if module == "tcgexp.bench":
        from tcgexp.cli.bench import parser

        try:
            parser().parse_args(args)
        except SystemExit as exc:  # an argument the benchmark does not take (status 2); --help exits 0
            assert exc.code == 0 and "--help" in args, f"{page}: {' '.join(command)}: exit {exc.code}"
        return
    args = [a for a in first_of_each_sweep(args) if a not in ("--multirun", "-m")]
    res = subprocess.run(
        [sys.executable, "-m", module, *args, "--cfg", "job"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, f"{page}: {' '.join(command)}:\n{res.stderr[-2000:]}"


RUN = [(p, c) for p, c, runs in COMMANDS if runs]


@pytest.mark.slow
@pytest.mark.parametrize("page, command", RUN, ids=[f"{p}: {' '.join(c)[:80]}" for p, c in RUN])
def test_a_cheap_command_runs_as_written(page, command, tmp_path):
    """Run in a fresh folder (its data/, outputs/ and .aim/ land there), exactly as the page writes it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, "-m", *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, f"{page}: {' '.join(command)}:\n{res.stderr[-3000:]}"


def test_no_page_counts_the_tests():
    """A test count goes stale with the next test: the pages say how to count them instead."""
    for page in PAGES:
        assert not re.search(r"\b\d{2,} tests\b", page.read_text()), page.name
