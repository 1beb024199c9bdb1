"""A submission Kaggle's harness runs: ``main.py`` (numpy only) and the policy file beside it, and a tarball.

``main.py`` is written from tcgexp's own modules, not a copy kept apart: the card database's arrays
(``cards.py``), the features a side may see (``features.py``), one pick's inputs (``observe.py``), the network
in numpy (``netpolicy.py``) and the policy file's reader (``policyfile.py``), one after another with their
imports of each other removed, then the agent. So the submission plays exactly what ``tcgexp-eval`` plays.

How it finds its weights: Kaggle's loader reads ``main.py``'s source, compiles it under its path and
``exec``s it in an empty namespace (no ``__file__``) with the file's folder appended to ``sys.path``
meanwhile, then calls the namespace's last callable. At that ``exec`` the agent looks for
``tcgexp_policy.npz`` beside the path its code was compiled under when that path is a file (then only there:
a harness that keeps a failed agent's folder on ``sys.path``, as ``get_last_callable`` does, must not lend
another submission's weights); else in ``sys.path`` (last first: the folder the loader appended), beside
``__file__`` when imported as a module, in the working directory, and in ``/kaggle_simulations/agent``
(where Kaggle unpacks a submission); the first found is loaded once. The agent
answers the first observation (``select`` null) with the policy's deck, starts its memory afresh at each
new round of a best-of-N match (``current.round``) and at each new game, and answers every other
observation with the network's own choices. A missing, damaged or altered policy file, or one whose deck breaks
the deck rules, fails that ``exec`` in one line naming the file (``policyfile.load``): the harness reports
the agent's load error, and the agent plays no game.
"""

from __future__ import annotations

import ast
import io
import tarfile
import time
from pathlib import Path

MODULES = ("cards", "tables", "features", "observe", "netpolicy", "policyfile")  # in dependency order
MAIN = "main.py"
EXPORTED = "written by tcgexp-export"  # in main.py's docstring: tcgexp-eval checks the policy file of such a main.py
TARBALL = "submission.tar.gz"

AGENT = '''
# ---- the agent (tcgexp/games/cabt/bundle.py) -----------------------------------------------------------
import os as _os
import sys as _sys


def _policy_path():
    """Where tcgexp_policy.npz is: beside the path this code was compiled under when that is a file (main.py
    itself: then there and nowhere else, so a missing file is never made good by another folder's); else on
    sys.path (the loader appends the submission's folder while it runs this file), beside __file__, here, or
    where Kaggle unpacks."""
    compiled = _policy_path.__code__.co_filename
    if _os.path.isfile(compiled):
        here = _os.path.join(_os.path.dirname(compiled) or ".", POLICY_FILE)
        if _os.path.isfile(here):
            return here
        raise FileNotFoundError(f"{here}: no such policy file; put the {POLICY_FILE} tcgexp-export wrote beside main.py")
    places = list(reversed(_sys.path))
    if globals().get("__file__"):
        places.append(_os.path.dirname(_os.path.abspath(globals()["__file__"])))
    places += [_os.getcwd(), "/kaggle_simulations/agent"]
    for place in places:
        path = _os.path.join(place or ".", POLICY_FILE)
        if _os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"{POLICY_FILE}: no such policy file on sys.path, beside __file__, in {_os.getcwd()} or "
        "/kaggle_simulations/agent; put the one tcgexp-export wrote beside main.py"
    )


_PLAYER = player(_policy_path())
_AGENT = _PLAYER  # who answers: the policy, or (a search export) the search agent with it as prior
_ROUND = [None]


def agent(obs, config=None):
    """The deck at the first observation; at each new round the memory starts afresh; then the network's own
    choices, as option indices."""
    if obs["select"] is None:
        _ROUND[0] = None
        _AGENT.reset()
        return _AGENT.deck()
    rnd = (obs["current"].get("round") or 1) if obs.get("current") else 1
    if rnd != _ROUND[0]:
        _AGENT.reset()
        _ROUND[0] = rnd
    return _AGENT.choose(obs)
'''

SEARCH_MODULES = ("search", "belief", "pimc")  # a search export's, after MODULES

SEARCH = '''
# ---- the search agent (tcgexp/games/cabt/bundle.py) ----------------------------------------------------
import ctypes as _ctypes
import importlib.util as _ilu
import platform as _platform
import shutil as _shutil
import tempfile as _tempfile
import types as _types


def _search_engine():
    """The engine library the harness provides (kaggle_environments' envs/cabt/cg), a private copy of it (its
    GameInitialize runs once per loaded library, and the harness's own copy has run it), and its Basic Pokémon."""
    spec = _ilu.find_spec("kaggle_environments")
    if spec is None or not spec.origin:
        raise ImportError("the search agent needs the engine kaggle-environments ships (envs/cabt/cg): not installed")
    name = "libcg-arm64.so" if _platform.machine() in ("arm64", "aarch64") else "libcg.so"
    path = _os.path.join(_os.path.dirname(spec.origin), "envs", "cabt", "cg", name)
    folder = _tempfile.mkdtemp(prefix="tcgexp-search-")
    try:
        copy = _os.path.join(folder, name)
        _shutil.copyfile(path, copy)
        lib = _ctypes.CDLL(copy)
    finally:
        _shutil.rmtree(folder, ignore_errors=True)
    lib.GameInitialize()
    lib.AllCard.restype = _ctypes.c_char_p
    return _types.SimpleNamespace(lib=lib), basic_ids(json.loads(lib.AllCard()))


def _searcher():
    eng, basics = _search_engine()
    deck = _PLAYER.deck()
    k = dict(SEARCH_KNOBS)
    if k["belief"] == "uniform":
        belief = UniformBelief(deck, basics=basics, seed=0)
    else:
        belief = DeckBelief(deck, basics=basics, model=DeckModel.from_json(SEARCH_DECKS), seed=0)
    clock = Clock(per_decision=float(k["per_decision"]), reserve=float(k["reserve"]), horizon=int(k["horizon"]))
    return SearchAgent(
        eng, deck, belief=belief, prior=_PLAYER, worlds=int(k["worlds"]), top_k=int(k["top_k"]),
        c_prior=float(k["c_prior"]), decisions=str(k["decisions"]), rollout_steps=int(k["rollout_steps"]), clock=clock,
    )


_SEARCHER = _searcher()
_AGENT = _SEARCHER
'''


def _module_source(name: str) -> str:
    """A module's source without its docstring, ``from __future__`` and its imports of tcgexp."""
    path = Path(__file__).with_name(f"{name}.py")
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    drop: set[int] = set()
    for node in tree.body:
        is_doc = isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant)
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        ours = isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("tcgexp"))
        if (is_doc and node is tree.body[0]) or future or ours:
            drop.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.Import) and any(a.name.startswith("tcgexp") for a in node.names):
            raise ValueError(f"tcgexp/games/cabt/{name}.py imports tcgexp at top level: it cannot ship in main.py")
    lines = [ln for i, ln in enumerate(text.splitlines(), 1) if i not in drop]
    return "\n".join(lines).strip("\n")


def top_level_names(source: str) -> dict[str, str]:
    """{name: how it is bound} for every name a module binds at its top level (imports by what they import)."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = f"def {node.name}"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = ast.unparse(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = "assignment"
    return out


def main_source(search: dict | None = None, decks: list | None = None) -> str:
    """main.py's text: the modules, then the agent, as one file; with `search` (the search agent's knobs,
    ``pimc.KNOBS``) and `decks` (its deck model, ``DeckModel.to_json``), the search agent answers, the policy its
    prior."""
    seen: dict[str, tuple[str, str]] = {}
    parts = [
        '"""A tcgexp policy for Kaggle\'s Pokémon TCG card battle (cabt), written by tcgexp-export: numpy only.\n\n'
        "The last callable is agent(obs, config). Beside it: tcgexp_policy.npz (weights, deck, card database).\n"
        '"""',
        "from __future__ import annotations",
    ]
    for name in MODULES + (SEARCH_MODULES if search else ()):
        src = _module_source(name)
        for bound, how in top_level_names(src).items():
            if bound in seen and not (how.startswith(("import", "from")) and how == seen[bound][1]):
                raise ValueError(f"{bound!r} is bound by both {seen[bound][0]}.py and {name}.py: main.py needs one")
            seen[bound] = (name, how)
        parts.append(f"# ---- tcgexp/games/cabt/{name}.py " + "-" * (80 - len(name)))
        parts.append(src)
    head, tail = AGENT.split("\n\n\ndef agent(", 1)
    parts.append(head.strip("\n"))
    if search:
        knobs = {k: v for k, v in search.items() if k != "kind"}
        parts.append(f"SEARCH_KNOBS = {knobs!r}\nSEARCH_DECKS = {decks!r}")
        parts.append(SEARCH.strip("\n"))
    parts.append("def agent(" + tail.strip("\n"))
    return "\n\n".join(parts) + "\n"


def write(folder: Path, policy_file: Path, *, search: dict | None = None, decks: list | None = None) -> dict:
    """main.py, the policy file and submission.tar.gz (both at its root) in `folder`: their paths (`search`,
    `decks`: ``main_source``'s)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from .policyfile import POLICY_FILE

    main = folder / MAIN
    weights = folder / POLICY_FILE
    data = Path(policy_file).read_bytes()
    _write_atomic(main, main_source(search, decks).encode())
    if Path(policy_file).resolve() != weights.resolve():
        _write_atomic(weights, data)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in (main, weights):
            info = tarfile.TarInfo(path.name)
            blob = path.read_bytes()
            info.size, info.mtime, info.mode = len(blob), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(blob))
    _write_atomic(folder / TARBALL, buf.getvalue())
    return {"main": str(main), "weights": str(weights), "tarball": str(folder / TARBALL)}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
