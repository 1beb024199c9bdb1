"""Green on the base install: every module of tcgexp imports with ``pip install -e .`` alone, except those
``tcgexp.extras.NEEDS`` names, each for the extra that brings what it misses.

The walk runs in a process that hides every installed package outside the base install's closure
(``tests/base_install.py``), so this environment's extras (the test tools, Ray, the peers where they are
installed) cannot make it pass where a fresh machine would fail.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tcgexp import extras
from tcgexp.bench import peers
from tests.base_install import base_closure

ROOT = Path(__file__).resolve().parents[1]


def extra_closure(extra: str) -> tuple[set[str], set[str]]:
    """(the extra's own requirements, every installed distribution it brings), by canonical name."""
    direct = set()
    for line in md.distribution("tcgexp").requires or []:
        req = Requirement(line)
        if req.marker is not None and req.marker.evaluate({"extra": extra}) and not req.marker.evaluate({"extra": ""}):
            direct.add(canonicalize_name(req.name))
    brought = set().union(*(base_closure(name) for name in direct)) if direct else set()
    return direct, brought


@pytest.fixture(scope="module")
def walked() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tests.base_install"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, f"the walk under the base install failed:\n{out.stderr[-4000:]}"
    return json.loads(out.stdout)


def test_every_module_imports_with_the_base_install_alone(walked):
    failing = {name: tuple(why) for name, why in walked["modules"].items() if why}
    table = "\n".join(
        f"  {name}: imports {missing} ({dist or 'not installed'})" for name, (missing, dist) in sorted(failing.items())
    )
    undeclared = sorted(set(failing) - set(extras.NEEDS))
    assert not undeclared, (
        f"these modules do not import with the base install alone; import the optional "
        f"package inside the function that needs it, or list the module in "
        f"tcgexp.extras.NEEDS with its extra:\n{table}"
    )
    stale = sorted(set(extras.NEEDS) - set(failing))
    assert not stale, f"listed in tcgexp.extras.NEEDS but importing with the base install alone (or gone): {stale}"
    for name, (missing, dist) in failing.items():
        direct, brought = extra_closure(extras.NEEDS[name])
        top = canonicalize_name(missing.split(".")[0])
        assert (dist in brought) if dist else (top in direct), (
            f"{name} misses {missing} ({dist or 'not installed'}), which the '{extras.NEEDS[name]}' extra does not bring"
        )


def test_the_walk_sees_every_module_and_hides_what_the_base_install_lacks(walked):
    """A walk that imported less, or hid nothing, would pass a broken base install."""
    assert "tcgexp.train.run" in walked["modules"] and "hydra_plugins.tcgexp_sweepers.halving" in walked["modules"]
    assert len(walked["modules"]) > 100
    code = (
        "import importlib.machinery, sys; from tests.base_install import HideExtras, base_closure, owners; "
        "h = HideExtras(base_closure(), owners()); "
        "sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = h; "
        "import importlib.util as u; print(u.find_spec('pytest') is None, u.find_spec('numpy') is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]  # pytest (the test extra) hidden, numpy seen


def test_every_extra_named_is_one_of_pyprojects():
    provided = {canonicalize_name(e) for e in md.distribution("tcgexp").metadata.get_all("Provides-Extra") or []}
    named = set(extras.NEEDS.values()) | set(extras.HOW)
    assert named <= provided, sorted(named - provided)


def test_a_peer_that_cannot_run_says_which_extra_brings_it(monkeypatch):
    """Where jax is absent, the benchmark's row says the extra and its install line (never a traceback)."""
    import builtins

    real = builtins.__import__

    def no_jax(name, *args, **kw):
        if name == "jax" or name.startswith("jax."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kw)

    monkeypatch.delitem(sys.modules, "tcgexp.bench.jax_peer", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_jax)
    why = peers.peer_factories(threads=1)["JAX jit"]
    assert isinstance(why, str) and "'peers' extra" in why and 'pip install -e ".[peers]"' in why, why
