"""Importing tcgexp changes nothing in the process; the entry points set up MKL when they run.

Every module (the commands' ``__main__`` aside) is imported, one after another, in a fresh process that
checks after each import: no environment variable changed, no MKL mapped, no import hook added. The modules
an entry point or a plug-in imports first (``tcgexp.api``, ``tcgexp.app``, ``tcgexp.train``, each command's
``__main__``) load no MLX, since MLX binds its BLAS when it loads; and a process that loaded MLX before
tcgexp's set-up is refused in one line, before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]

WALK = r"""
import importlib, json, os, pkgutil, sys
import tcgexp, hydra_plugins.tcgexp_sweepers
from tcgexp.extras import NEEDS

def mkl_mapped():
    with open("/proc/self/maps") as maps:
        return any("libmkl" in line for line in maps)

names = [m.name for m in pkgutil.walk_packages(tcgexp.__path__, "tcgexp.")]
names += [m.name for m in pkgutil.walk_packages(hydra_plugins.tcgexp_sweepers.__path__, "hydra_plugins.tcgexp_sweepers.")]
env, hooks, path_hooks = dict(os.environ), list(sys.meta_path), list(sys.path_hooks)
found = {}
for name in names:
    if name.endswith("__main__") or name in NEEDS:
        continue
    importlib.import_module(name)
    changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
    wrong = [*(f"set {k}" for k in changed), *(["mapped MKL"] if mkl_mapped() else []),
             *(["added an import hook"] if sys.meta_path != hooks or sys.path_hooks != path_hooks else [])]
    if wrong:
        found[name] = wrong
        env, hooks, path_hooks = dict(os.environ), list(sys.meta_path), list(sys.path_hooks)
print(json.dumps({"checked": len(names), "found": found}))
"""


def clean_env() -> dict[str, str]:
    """This environment without what a set-up would have put there (the walk must see the change)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "TCGEXP_BLAS")}
    return {**env, "PYTHONPATH": str(ROOT)}


def test_importing_any_module_changes_nothing_in_the_process():
    out = subprocess.run(
        [sys.executable, "-c", WALK], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    walked = json.loads(out.stdout)
    assert walked["checked"] > 100
    assert walked["found"] == {}, walked["found"]


def test_the_walk_sees_a_set_up():
    """The same check on ``setup()`` itself: the change an import must not make is seen (MKL_CBWR, MKL)."""
    code = (
        "import os, json; from tcgexp.learn.blas import setup; before = dict(os.environ); line = setup(); "
        "maps = open('/proc/self/maps').read(); "
        "print(json.dumps([line, os.environ.get('MKL_CBWR') != before.get('MKL_CBWR'), 'libmkl' in maps]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    line, set_cbwr, mapped = json.loads(out.stdout)
    assert line.startswith("mkl: ") and set_cbwr and mapped, (line, out.stderr[-2000:])


def test_what_an_entry_point_imports_first_loads_no_mlx():
    """MLX binds its BLAS when it loads: the plug-in surface, the composer, the train package, the commands'
    modules and the Hydra callbacks a launcher's worker unpickles must leave that to the set-up their entry
    points run (a module that imported mlx.core here would get every run, or every worker's job, refused)."""
    first = [
        "tcgexp.api",
        "tcgexp.app",
        "tcgexp.train",
        "tcgexp.cli.train",
        "tcgexp.cli.bench",
        "tcgexp.cli.data",
        "tcgexp.cli.kernels",
        "tcgexp.report.report",
        "tcgexp.lifecycle.launcher",
        # what a launcher pickles for its workers (joblib, submitit, Ray): they unpickle it, which imports
        # these modules, before the task's own setup() runs
        "tcgexp.train.run_guard",
        "tcgexp.report.callbacks",
        "hydra_plugins.tcgexp_sweepers.halving",
    ]
    code = (
        "import importlib, json, sys\n"
        f"for name in {first!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'mlx.core' in sys.modules:\n"
        "        print(json.dumps(name)); break\n"
        "else:\n"
        "    print(json.dumps(None))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) is None, f"importing {json.loads(out.stdout)} loaded mlx.core"


def run_script(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


TRAIN = (
    "from tcgexp.api import compose, train\ncfg = compose(*{overrides!r})\nprint(train(cfg, run_dir={run!r})['blas'])\n"
)


def test_a_process_that_loaded_mlx_first_is_refused_in_one_line(tmp_path):
    overrides = [f"dataset.root={tmp_path / 'data'}", *TINY, "trainer.epochs=1", "tracking=off", "model.hidden=8"]
    run = str(tmp_path / "run")
    code = "import mlx.core\n" + TRAIN.format(overrides=overrides, run=run)
    done = run_script(
        tmp_path,
        "from tcgexp.console import one_line_errors\n"
        "from tcgexp.train.errors import USER_ERRORS\n"
        "@one_line_errors(*USER_ERRORS)\ndef main():\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + "main()\n",
    )
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert "mlx.core was imported before tcgexp set up MKL" in lines[0] and "tcgexp.api.setup()" in lines[0]
    assert not Path(run).exists(), "refused before any work"
    # the same script set up first trains on MKL; TCGEXP_BLAS=reference trains on MLX's own BLAS, as asked
    set_up = run_script(tmp_path, "from tcgexp.api import setup\nsetup()\n" + code.replace(run, run + "-mkl"))
    assert set_up.returncode == 0 and set_up.stdout.strip().splitlines()[-1].startswith("mkl: "), set_up.stderr[-3000:]
    chosen = run_script(tmp_path, code.replace(run, run + "-ref"), TCGEXP_BLAS="reference")
    assert chosen.returncode == 0 and "TCGEXP_BLAS=reference" in chosen.stdout, chosen.stderr[-3000:]
