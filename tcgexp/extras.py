"""The optional extras: which modules of tcgexp need one, and the one line that says how to get it.

The base install (``pip install -e .``) builds the corpus, trains, sweeps and tracks. What needs more is an
extra of pyproject.toml: ``peers`` (JAX and PyTorch, the benchmark's peers), ``ray`` (Hydra's Ray launcher),
``sweep`` (optuna-dashboard, the study's database drivers), ``docs`` (MkDocs), ``cabt`` (the real game's engine, ``kaggle-environments``; its modules import without it and
say so at first use), ``test`` (pytest, moto and the
extras the tests exercise). A module of tcgexp whose own imports need an extra is listed in ``NEEDS``; every
other module imports with the base install alone, which ``tests/test_extras.py`` checks by importing each
module in a process that can see only the base install's packages.
"""

from __future__ import annotations

import importlib.util

# a module of tcgexp -> the extra its top-level imports need (nothing else of the base install imports it at
# module level: the benchmark loads a peer only when it runs one)
NEEDS = {
    "tcgexp.bench.jax_peer": "peers",
    "tcgexp.bench.torch_peer": "peers",
}

# how to install each extra from a clone (pyproject.toml says what each holds)
HOW = {
    # torch's CPU build first: a bare `torch` from PyPI resolves to a CUDA build of several GB
    "peers": 'pip install -e ".[peers]" (torch 2.13.0\'s CPU wheel first, where none is on hand: pyproject.toml)',
    "ray": 'pip install -e ".[ray]"',
    "sweep": 'pip install -e ".[sweep]"',
    "docs": 'pip install -e ".[docs]"',
    "test": 'pip install -e ".[test]"',
    "cabt": 'pip install -e ".[cabt]"',
}


def install_line(extra: str) -> str:
    """The command that installs `extra` into the current environment, from a clone of tcgexp."""
    return HOW.get(extra, f'pip install -e ".[{extra}]"')


def missing(what: str, extra: str, exc: ImportError | None = None) -> str:
    """One line for an optional part that cannot run here: what is missing, from which extra, how to get it."""
    name = f" ({exc.name} is not installed)" if exc is not None and exc.name else ""
    return f"{what} needs the '{extra}' extra{name}: {install_line(extra)}"


# what each extra brings, by the import names that show it is installed
PROBES = {
    "peers": ("jax", "torch"),
    "ray": ("ray", "hydra_plugins.hydra_ray_launcher"),
    "sweep": ("optuna_dashboard", "psycopg", "pymysql"),
    "docs": ("mkdocs", "material"),
    "test": ("pytest", "moto"),
    "cabt": ("kaggle_environments",),
}


def installed(extra: str) -> bool:
    """Whether every package `extra` brings can be imported here."""
    return all(_findable(name) for name in PROBES[extra])


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is absent
        return False
