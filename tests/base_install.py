"""Import every module of tcgexp as if only the base install were there: ``python -m tests.base_install``.

The packages this environment holds beyond tcgexp's base requirements (its extras' packages, the test
tools, anything installed by hand) are hidden by an import hook in this process only: a module whose file
belongs to an installed distribution outside the base closure raises ModuleNotFoundError, as on a machine
that ran ``pip install -e .`` alone. The closure is read from the installed metadata (tcgexp's
Requires-Dist without extras, then each requirement's own, with the extras it names), so it follows
pyproject.toml with no list kept here. Prints one JSON object: {"hidden": [distributions hidden],
"modules": {module: null, or [the missing import, the distribution it belongs to ("" when it is not installed
at all)]}}.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata as md
import json
import os
import pkgutil
import sys

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def base_closure(root: str = "tcgexp") -> set[str]:
    """The distributions `pip install <root>` brings, by canonical name, read from what is installed."""
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # a requirement whose marker held but that is not installed: nothing of it can be imported
        seen.add(key)
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [dict(default_environment(), extra=e) for e in (extras or {""})]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                sub = frozenset(canonicalize_name(e) for e in req.extras)
                if canonicalize_name(req.name) not in seen or sub:
                    todo.append((req.name, sub))
    return seen


def owners() -> dict[str, str]:
    """{absolute path of an installed module file or package folder: its distribution's canonical name}."""
    out: dict[str, str] = {}
    for dist in md.distributions():
        key = canonicalize_name(dist.metadata["Name"] or "")
        for f in dist.files or []:
            if f.suffix in (".py", ".so", ".pyd") or f.name.endswith(".pth"):
                path = os.path.realpath(dist.locate_file(f))
                out[path] = key
                out.setdefault(os.path.dirname(path), key)
    return out


class HideExtras(importlib.abc.MetaPathFinder):
    """Python's path finder, blind to modules whose file belongs to a distribution outside the base closure:
    for those it finds nothing, so ``import`` and ``importlib.util.find_spec`` behave as if it were absent."""

    def __init__(self, allowed: set[str], owner: dict[str, str]) -> None:
        self.allowed, self.owner = allowed, owner
        self.hidden: dict[str, str] = {}  # import name -> the distribution it belongs to

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None:
            return None
        places = [spec.origin] if spec.origin and spec.has_location else list(spec.submodule_search_locations or [])
        for place in places:
            dist = self.owner.get(os.path.realpath(place))
            if dist is not None and dist not in self.allowed:
                self.hidden[fullname] = dist
                return None
        return spec

    def find_distributions(self, context=None):
        """The installed metadata, without the hidden distributions' (``importlib.metadata.version(...)``)."""
        for dist in importlib.machinery.PathFinder.find_distributions(context or md.DistributionFinder.Context()):
            if canonicalize_name(dist.metadata["Name"] or "") in self.allowed:
                yield dist

    def invalidate_caches(self) -> None:
        importlib.machinery.PathFinder.invalidate_caches()


def walk() -> dict:
    allowed = base_closure()
    hook = HideExtras(allowed, owners())
    sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = hook
    import hydra_plugins.tcgexp_sweepers
    import tcgexp

    names = [m.name for m in pkgutil.walk_packages(tcgexp.__path__, "tcgexp.")]
    names += [
        m.name for m in pkgutil.walk_packages(hydra_plugins.tcgexp_sweepers.__path__, "hydra_plugins.tcgexp_sweepers.")
    ]
    modules: dict[str, list[str] | None] = {}
    for name in ["tcgexp", *names]:
        if name.endswith("__main__"):
            continue  # a command's body runs when imported as __main__ only, but skip them: they are entry points
        try:
            importlib.import_module(name)
            modules[name] = None
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            modules[name] = [missing, hook.hidden.get(missing, "")]
    return {"hidden": sorted(set(hook.hidden.values())), "modules": modules}


if __name__ == "__main__":
    print(json.dumps(walk()))
