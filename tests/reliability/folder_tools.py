"""Run ``tcgexp.train``'s command line in a folder and look at what it left there (the run-folder tests' tools)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tcgexp_train(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (links not followed): its kind and, for files, its sha256."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            out[rel] = (
                ("link:" + os.readlink(p))
                if p.is_symlink()
                else ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            )
    return out


def users_results(folder: Path) -> Path:
    """A user's folder that looks like a run dir: the case that lost checkpoints/best/model.pt."""
    (folder / "checkpoints" / "best").mkdir(parents=True)
    (folder / "checkpoints" / "best" / "model.pt").write_bytes(b"weights of a month")
    (folder / "result.json").write_text('{"mine": true}')
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("my_app: {lr: 0.1}\n")  # their own Hydra app's
    return folder


def one_line_refusal(res: subprocess.CompletedProcess, names: str) -> None:
    assert res.returncode != 0, res.stdout[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], res.stderr[-3000:]
