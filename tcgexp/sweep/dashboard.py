"""optuna-dashboard on a halving sweep's study, and a screenshot of it in headless Chromium.

    optuna-dashboard sqlite:///multirun/lr/optuna.db                       # browse it (port 8080)
    python -m tcgexp.sweep.dashboard multirun/lr --out shots/              # optuna_dashboard.png

The study page shows each configuration's value at every rung it reached (Optuna's intermediate values,
at step = epochs: the halving's learning curves), the pruned and complete trials, and the parameters'
importances. ``--out`` is required: nothing is written over ``docs/`` unless asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import urllib.request
from pathlib import Path

from ..console import one_line_errors
from ..report.screenshot import capture, free_port, served

TEXT = "document.body.innerText.slice(0, 4000)"


def storage_of(where: str) -> str:
    """A sweep dir (its optuna.db), a storage URL, or a journal file, as optuna-dashboard takes it."""
    path = Path(where).expanduser()
    if path.is_dir():
        db = path / "optuna.db"
        if not db.exists():
            raise FileNotFoundError(
                f"{where}: no optuna.db there (a halving sweep's dir holds one; with "
                "hydra.sweeper.storage set, pass that URL instead)"
            )
        return f"sqlite:///{db.absolute()}"
    if "://" not in where and not path.exists():
        raise FileNotFoundError(f"{where}: neither a sweep dir, a storage URL nor a journal file")
    return where


def study_page(base: str, name: str | None) -> tuple[str, str]:
    """(URL of the study's page, its name): the study called `name`, or the only one there."""
    studies = json.loads(urllib.request.urlopen(f"{base}/api/studies", timeout=30).read())["study_summaries"]
    chosen = [s for s in studies if name in (None, s["study_name"])]
    if len(chosen) != 1:
        names = ", ".join(s["study_name"] for s in studies) or "none"
        raise FileNotFoundError(f"--study {name}: the storage holds the studies {names}; name one with --study")
    return f"{base}/dashboard/studies/{chosen[0]['study_id']}", chosen[0]["study_name"]


@one_line_errors(FileNotFoundError, TimeoutError)  # no chromium, no optuna-dashboard, a dashboard that never answers
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tcgexp.sweep.dashboard")
    p.add_argument("study", help="a halving sweep's dir (hydra.sweep.dir), a storage URL, or a journal file")
    p.add_argument("--out", required=True, help="the folder for optuna_dashboard.png")
    p.add_argument("--study-name", default=None, help="which study, when the storage holds several")
    p.add_argument("--settle", type=float, default=8.0, help="seconds to let the page draw")
    p.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = p.parse_args(argv)
    storage = storage_of(args.study)
    exe = shutil.which("optuna-dashboard")
    if exe is None:
        raise FileNotFoundError("optuna-dashboard is not installed: pip install 'tcgexp[sweep]'")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with served(
        [exe, storage, "--host", "127.0.0.1", "--port", str(port)], f"{base}/api/studies", args.chromium
    ) as devtools:
        url, name = study_page(base, args.study_name)
        text = asyncio.run(capture(devtools, {"optuna_dashboard": (url, [TEXT])}, out, args.settle))[
            "optuna_dashboard"
        ][-1]  # the page's text, after it drew
    print(out / "optuna_dashboard.png")
    print(f"study {name!r}: the page shows {'its name' if name in (text or '') else 'NOT its name'}", file=sys.stderr)


if __name__ == "__main__":
    main()
