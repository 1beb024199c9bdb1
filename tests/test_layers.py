"""A house without circles: the whole import graph (every module of tcgexp/ and hydra_plugins/, top-level
modules included, imports inside functions and under TYPE_CHECKING included) has no cycle, and no module
imports one on a layer above it.

The layers, bottom up (``docs/design.md`` draws them):

- base: the top-level modules every layer may use (errors, console, schema, config, launch, ownership, extras,
  plugins, progress, overrides, memlimit), importing nothing above them;
- games (``tcgexp/games``: the registry, the built-in simulator, the real game, each game in its own wing)
  < data < plan, cache, track (Aim tracking; the planner, the cache and tracking never import each other) < learn
  (the model, its step, optimizers and schedules), report (a sweep's report and findings, its Aim link and end
  callbacks: it reads tracking's job context; learn and report never import each other) < lifecycle (a run's folder, signals, checkpoints, resume, ranks) <
  eval (a run's policy played in its game's arena, counted) < train (composes a run) < sweep (with the
  sweeper's Hydra plugin class in hydra_plugins/), sequence (the daily sequence of training runs); kernels (the step's compiled kernels, built and loaded) beside
  games: it imports no other part, and only learn uses it;
- the entry layer: ``tcgexp/app.py`` (registers schemas, resolvers, the sweeper; composes); then the
  benchmark tools (``tcgexp/bench``: they compose runs) and the docs' generated references
  (``tcgexp/reference``: they compose every option); then the commands (``tcgexp/cli``: every console
  script's body; the packages' ``__main__.py`` aliases run them by name) and ``tcgexp/api.py``, the plug-in
  surface, which nothing of tcgexp imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "errors",
    "console",
    "schema",
    "config",
    "launch",
    "ownership",
    "plugins",
    "progress",
    "overrides",
    "memlimit",
    "extras",
    "winrate",
}
RANK = {
    "base": 0,
    "games": 1,
    "kernels": 1,
    "data": 2,
    "plan": 3,
    "cache": 3,
    "track": 3,
    "learn": 4,
    "report": 4,
    "lifecycle": 5,
    "eval": 5.5,  # above lifecycle (a checkpoint's weights, result.json), below train (a run's end plays)
    "train": 6,
    "sweep": 7,
    "sequence": 7,  # the daily sequence: training phases, their evaluation and tracking (beside sweep)
    "hydra_plugins": 7,
    "entry": 8,
    "bench": 9,
    "reference": 9,
    "cli": 10,
    "api": 10,
}
APART = {
    ("plan", "cache"),
    ("cache", "plan"),
    ("plan", "track"),
    ("track", "plan"),
    ("cache", "track"),
    ("track", "cache"),
    ("learn", "report"),
    ("report", "learn"),
}  # one layer, parts that never import each other (plan, cache, track; learn, report)


def modules() -> dict[str, Path]:
    """Every module of the house by its dotted name (packages' __init__ by the package's name)."""
    out = {}
    for top in ("tcgexp", "hydra_plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = modules()


def imports_of(name: str, path: Path) -> dict[str, int]:
    """{module of the house: line} for every import in `path`, at any depth (functions, TYPE_CHECKING)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = (package[: len(package) - node.level + 1] if node.level else []) + (
                node.module.split(".") if node.module else []
            )
            for alias in node.names:  # `from pkg import module` names the module, else the package's own file
                for candidate in (".".join([*base, alias.name]), ".".join(base)):
                    if candidate in MODULES:
                        out.setdefault(candidate, node.lineno)
                        break
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                for n in range(len(parts), 0, -1):  # `import a.b.c` loads a, a.b and a.b.c: the deepest counts
                    if ".".join(parts[:n]) in MODULES:
                        out.setdefault(".".join(parts[:n]), node.lineno)
                        break
    out.pop(name, None)
    return out


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def layer(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "hydra_plugins":
        return "hydra_plugins"
    if parts[-1] == "__main__" or parts[1:2] == ["cli"]:
        return "cli"
    if name == "tcgexp.app":
        return "entry"
    if name == "tcgexp.api":
        return "api"
    if len(parts) == 2 and parts[1] in BASE:
        return "base"
    if len(parts) >= 2 and parts[1] in RANK:
        return parts[1]
    return "unplaced"


def test_the_graph_is_read_whole():
    """The walk sees what a picture of the imports shows: top-level modules, the plug-in, imports inside
    functions (a test that reads less would pass a house with circles)."""
    assert "tcgexp.app" in GRAPH and "hydra_plugins.tcgexp_sweepers.halving" in GRAPH
    assert "tcgexp.sweep.sweeper" in GRAPH["hydra_plugins.tcgexp_sweepers.halving"], "an import inside a method"
    assert "hydra_plugins.tcgexp_sweepers.halving" in GRAPH["tcgexp.app"]
    assert "tcgexp.lifecycle.rundir" in GRAPH["tcgexp.cli.train"]
    unplaced = sorted(
        n
        for n in GRAPH
        if layer(n) == "unplaced"
        and not n.endswith("__init__")
        and n not in ("tcgexp", "hydra_plugins", "hydra_plugins.tcgexp_sweepers")
    )
    assert not unplaced, f"modules on no layer (add them to BASE or a package): {unplaced}"


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a sorted list."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_anywhere():
    found = cycles(GRAPH)
    shown = ["; ".join(f"{a} -> {b} (line {GRAPH[a][b]})" for a in c for b in GRAPH[a] if b in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(shown)


def test_the_cycle_finder_finds_a_planted_cycle():
    planted = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert cycles(planted) == [["a", "b", "c"]]
    assert cycles({**planted, "c": {}}) == []


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    wrong = []
    for name, imported in graph.items():
        here = layer(name)
        for other, line in imported.items():
            there = layer(other)
            if here == there or "unplaced" in (here, there):
                continue
            if RANK[there] > RANK[here] or (here, there) in APART:
                wrong.append(f"{MODULES[name].relative_to(ROOT)}:{line} ({here}) imports {other} ({there})")
    return wrong


def test_no_module_imports_one_above_it():
    wrong = upward(GRAPH)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "low, high",
    [
        ("tcgexp.errors", "tcgexp.app"),
        ("tcgexp.train.run", "tcgexp.sweep.sweeper"),
        ("tcgexp.plan.planner", "tcgexp.cache.policy"),
        ("tcgexp.learn.step", "tcgexp.lifecycle.checkpoint"),
        ("tcgexp.lifecycle.resume", "tcgexp.train.run"),
    ],
    ids=["base->entry", "train->sweep", "plan->cache", "learn->lifecycle", "lifecycle->train"],
)
def test_the_layer_check_refuses_a_planted_upward_import(low, high):
    assert upward({low: {high: 1}}), f"{low} importing {high} must be refused"


PROBE = """
import os, runpy, sys, traceback
root, out = sys.argv[1], sys.argv[2]

def probe(frame, event, arg):  # the call stack at the first optimizer update, then stop
    if event == "call" and frame.f_code.co_name == "update" and "mlx/optimizers" in frame.f_code.co_filename:
        stack = [f"{os.path.relpath(f.filename, root)}:{f.name}" for f in traceback.extract_stack(frame)
                 if f.filename.startswith(os.path.join(root, "tcgexp"))]
        open(out, "w").write("\\n".join(stack))
        os._exit(0)

sys.setprofile(probe)
sys.argv = ["tcgexp.train", *sys.argv[3:]]
runpy.run_module("tcgexp.train", run_name="__main__", alter_sys=True)
"""


def test_a_readers_path_to_the_first_update(tmp_path):
    """From `python -m tcgexp.train` to the first optimizer update through at most 12 project files
    (docs/design.md names them): the call stack at that update, measured on a real run (on the pure MLX
    step, trainer.kernels=pure: MLX's optimizer is where the probe stops; the fused step's update is
    fused_step.py's, one frame further)."""
    import subprocess
    import sys

    from tests.conftest import TINY

    out = tmp_path / "stack.txt"
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(ROOT),
            str(out),
            f"dataset.root={tmp_path / 'data'}",
            *TINY,
            "tracking=off",
            "trainer.epochs=1",
            "trainer.kernels=pure",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), res.stderr[-3000:]
    frames = out.read_text().splitlines()
    files = list(dict.fromkeys(f.split(":")[0] for f in frames))
    assert files[0] == "tcgexp/train/__main__.py" and files[-1] == "tcgexp/learn/step.py", files
    assert len(files) <= 12, files
    documented = (ROOT / "docs" / "design.md").read_text()
    assert f"passes through {len(files)} project files ({len(frames)} frames)" in documented
    assert all(f in documented for f in files), "docs/design.md names every file of the path"


def test_the_design_page_lists_the_base_this_test_ranks():
    """docs/design.md draws the layers; its line of base modules is the set this test ranks lowest."""
    page = (ROOT / "docs" / "design.md").read_text().splitlines()
    [line] = [ln for ln in page if ln.rstrip().endswith("(the base)")]
    assert {n.strip() for n in line.split("(the base)")[0].split(",")} == BASE


def room(name: str) -> str:
    """The part of the house a module is in, as a picture of the tree draws it: a top-level package of tcgexp
    (``tcgexp/data/``, ...), a top-level module (``tcgexp/app.py``), or ``hydra_plugins``."""
    parts = name.split(".")
    return "hydra_plugins" if parts[0] == "hydra_plugins" else ".".join(parts[:2])


def test_no_two_parts_of_the_house_import_each_other():
    """Read a folder at a time, the graph still runs one way: no package imports, through any of its modules,
    one that imports it back (a command's body inside a library package did: ``data/__main__.py`` imported
    ``app.py``, which imports ``data``). The aliases ``python -m tcgexp.train`` etc. run their command by name."""
    rooms: dict[str, dict[str, int]] = {}
    for name, imported in GRAPH.items():
        mine = rooms.setdefault(room(name), {})
        for other in imported:
            if room(other) != room(name):
                mine.setdefault(room(other), 0)
    for r in list(rooms.values()):
        for other in r:
            rooms.setdefault(other, {})
    found = cycles(rooms)
    assert not found, f"parts of the house that import each other: {found}"
