"""tcgexp's own kernel cache (``~/.cache/tcgexp/kernels``): a library is loaded only once it is verified.

A ``_fused`` library truncated to 1,000 bytes used to kill every run that loaded it with SIGBUS (exit 135, no
line, no result.json), until the cache was deleted by hand; and a run without a C++ compiler took the pure step
although the kernels were built. Now each build records its library's size and sha256; a damaged or foreign
library is built again (one line says why), or, without a compiler, not loaded (the run takes the pure step and
its line says why, ``trainer.kernels=fused`` is one error); a verified build loads without a compiler. A run that
dies of a signal where it writes no record (a library that crashes as it loads) is named, with what it was doing,
by the next run in its folder.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sweep.conftest import job_env
from tests.train.conftest import TINY_TRAIN

pytestmark = pytest.mark.slow  # real runs in processes of their own, some with no compiler on PATH


@pytest.fixture(scope="module")
def built_here():
    """A verified build of the kernels for this MLX and compiler (the user's cache: built once if missing)."""
    from tcgexp.kernels.build import MODULE, BuildError, built

    try:
        folder = built()
    except BuildError as exc:
        pytest.skip(f"tcgexp's kernels cannot be built here: {exc}")
    return folder, next(folder.glob(f"{MODULE}*.so")).name


def cache_with(tmp_path: Path, built_here, *, damage_to: str | None = None) -> Path:
    """A kernels cache holding a copy of the build (its folder named as this compiler names it), its library
    truncated to 1,000 bytes ("truncated") or replaced by another file of the same size ("foreign")."""
    folder, lib = built_here
    cache = tmp_path / "kernels"
    shutil.copytree(folder, cache / folder.name)
    so = cache / folder.name / lib
    data = so.read_bytes()
    if damage_to == "truncated":
        so.write_bytes(data[:1000])
    elif damage_to == "foreign":
        so.write_bytes(data[:-4096] + bytes(4096))  # same size, its last page zeroed
    return cache / folder.name


def train(tmp_path: Path, cache: Path, *args: str, compiler: bool = True) -> subprocess.CompletedProcess:
    env = {**job_env(), "TCGEXP_KERNELS_CACHE": str(cache.parent)}
    env.pop("CXX", None)
    if not compiler:  # no C++ compiler on PATH: an empty folder is all of it
        (tmp_path / "bin").mkdir(exist_ok=True)
        env["PATH"] = str(tmp_path / "bin")
    cmd = [sys.executable, "-m", "tcgexp.train", f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "trainer.epochs=1"]
    return subprocess.run([*cmd, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def said(done: subprocess.CompletedProcess, word: str) -> list[str]:
    return [ln for ln in (done.stdout + done.stderr).splitlines() if word in ln]


def test_a_truncated_library_is_built_again_in_one_line_and_the_run_takes_the_fused_step(tmp_path, built_here):
    folder = cache_with(tmp_path, built_here, damage_to="truncated")
    done = train(tmp_path, folder, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = said(done, "building tcgexp's kernels")
    assert f"into {folder})" in line and "cannot be loaded" in line and "is 1,000 bytes" in line, line
    assert said(done, "[train] fused step"), done.stdout[-2000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["kernels"] == "fused"
    from tcgexp.kernels.build import damage

    assert damage(folder) is None  # built again in its place: the next run loads it as it is
    again = train(tmp_path, folder, f"hydra.run.dir={tmp_path / 'again'}")
    assert again.returncode == 0 and not said(again, "building"), again.stdout[-2000:]


@pytest.mark.parametrize("damage_to", ["truncated", "foreign"])
@pytest.mark.parametrize("kernels", ["auto", "fused"])
def test_without_a_compiler_a_damaged_library_is_never_loaded(tmp_path, built_here, damage_to, kernels):
    folder = cache_with(tmp_path, built_here, damage_to=damage_to)
    run_dir = tmp_path / "run"
    done = train(tmp_path, folder, f"trainer.kernels={kernels}", f"hydra.run.dir={run_dir}", compiler=False)
    why = "is 1,000 bytes" if damage_to == "truncated" else "not the file that was built"
    if kernels == "auto":
        assert done.returncode == 0, done.stderr[-3000:]
        [line] = said(done, "trainer.kernels")
        assert line.startswith(f"[train] pure MLX step (trainer.kernels=auto: the kernels built in {folder} ")
        assert why in line and "no C++ compiler" in line and f"delete {folder}" in line, line
        assert json.loads((run_dir / "result.json").read_text())["kernels"] == "pure"
    else:
        assert done.returncode == 1, done.stderr[-3000:]
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: trainer.kernels=fused, but the kernels built in"), lines
        assert why in lines[0] and "use trainer.kernels=auto or pure" in lines[0], lines
        assert not run_dir.exists()  # a refusal: nothing left


def test_without_a_compiler_the_built_library_is_loaded(tmp_path, built_here):
    folder = cache_with(tmp_path, built_here)
    shutil.move(folder, folder.with_name("mlx-built-by-another-compiler"))  # found by what it was built for
    done = train(tmp_path, folder, f"hydra.run.dir={tmp_path / 'run'}", compiler=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = said(done, "trainer.kernels") or said(done, "[train] fused step")
    assert line.startswith("[train] fused step (tcgexp's fused CPU kernels") and "mlx-built-by-another" in line, line
    assert json.loads((tmp_path / "run" / "result.json").read_text())["kernels"] == "fused"


CRASH_AS_IT_LOADS = """
import os, signal, sys
from tcgexp.learn.blas import setup
setup()
import tcgexp.learn.fused_step as fused_step
fused_step.load = lambda say=None: os.kill(os.getpid(), signal.SIGBUS)  # what mapping a truncated library did
sys.argv = ["tcgexp-train", *sys.argv[1:]]
from tcgexp.cli.train import main
main()
"""


def test_a_run_killed_by_a_signal_as_its_kernels_load_is_named_by_the_next_run_in_its_folder(tmp_path, built_here):
    run_dir = tmp_path / "run"
    args = [f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN, "trainer.epochs=1", f"hydra.run.dir={run_dir}"]
    crashed = subprocess.Popen(
        [sys.executable, "-c", CRASH_AS_IT_LOADS, *args],
        cwd=tmp_path,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = crashed.communicate(timeout=600)[0]
    assert crashed.returncode == -signal.SIGBUS, out[-3000:]
    assert not (run_dir / "result.json").exists()
    after = subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *args],
        cwd=tmp_path,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert after.returncode == 0, after.stderr[-3000:]
    [line] = said(after, "ended without a record")
    assert f"(pid {crashed.pid} " in line
    assert "while building or loading tcgexp's fused kernels (trainer.kernels=auto)" in line and "SIGBUS" in line, line


def test_a_damaged_library_in_a_cache_that_cannot_be_written_is_one_line(tmp_path, built_here):
    """A compiler, but a read-only cache: the damaged build is not loaded and cannot be replaced; auto takes the
    pure step, its line naming both."""
    folder = cache_with(tmp_path, built_here, damage_to="truncated")
    cache = folder.parent
    if subprocess.run(["mount", "--bind", str(cache), str(cache)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(cache)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        done = train(tmp_path, folder, f"hydra.run.dir={tmp_path / 'run'}")
    finally:
        subprocess.run(["umount", str(cache)], capture_output=True)
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = said(done, "trainer.kernels")
    assert line.startswith(f"[train] pure MLX step (trainer.kernels=auto: the build in {folder} cannot be loaded")
    assert "is 1,000 bytes" in line and "Read-only file system" in line, line
