"""The fused step (tcgexp's kernels, ``trainer.kernels=fused``) computes exactly what the pure MLX step does.

Bit for bit, not within a tolerance: every kernel repeats the pure step's float32 operations in MLX's
order (tcgexp/kernels/csrc), and the matrix products are MLX's own. Shown
- free-running over one demo epoch (each path on its own trajectory from the same initial state):
  every step's values, and at the end every weight, optimizer moment and lane memory;
- on the accumulation path (``Stepper.grads`` + ``Stepper.apply``, accum_steps > 1);
- for the gradients alone across the scan's block layouts (one block, several, padded), widths from
  1, with and without memory, with gates driven into their clipped ranges.
(tests/train/test_backprop.py holds both paths' gradients to MLX's autodiff; test_train.py holds resume
and cache-policy invariance on both paths.) And where the kernels cannot be had: ``auto`` runs the pure
step saying why in one line, ``fused`` is one error naming the key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from tcgexp import sim
from tcgexp.bench.adamw_rule import AdamWRule
from tcgexp.learn.backprop import loss_and_grads
from tcgexp.learn.fused_step import FusedStep
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.state import LaneMemory
from tcgexp.learn.step import Stepper, add_grads, to_mx

from .test_backprop import targets_for
from .test_fast_step import demo_epoch
from .test_model import A, F, lane_inputs


@pytest.fixture(scope="module")
def kernels():
    from tcgexp.kernels import load

    module, why = load()
    if module is None:
        pytest.skip(f"tcgexp's kernels cannot run here: {why}")
    return module


def stepper(path: str, hidden: int, memory: bool = True) -> Stepper:
    mx.random.seed(0)
    model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=hidden, memory=memory)
    opt = AdamWRule().mlx()
    opt.init(model.trainable_parameters())
    s = Stepper(model, opt, aux_weight=0.25, grad_clip=AdamWRule().grad_clip, kernels=path)
    assert s.path == path, s.path_line
    return s


def state_of(s: Stepper, memory: LaneMemory) -> dict:
    mx.eval(s.state, memory.table)
    return {**{k: np.array(v) for k, v in tree_flatten(s.state)}, "lane memory": np.array(memory.table)}


def assert_same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, f"differ: {differ[:6]}"


@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
def test_a_free_running_demo_epoch_is_bit_identical_on_both_paths(kernels, tmp_path, memory):
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden = int(cfg.model.hidden)
    runs = {}
    for path in ("pure", "fused"):
        s, mem, values = stepper(path, hidden, memory), LaneMemory(lanes, hidden), []
        for prep in batches:
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            out, carry = s.step(inputs, targets, mem.read(prep, inputs["lane_decisions"].shape[0]))
            mem.write(prep, carry)
            mx.eval(out, mem.table, s.state)
            values.append(np.array(out))
        runs[path] = (np.array(values), state_of(s, mem))
    assert np.array_equal(runs["pure"][0], runs["fused"][0]), "every step's loss parts, norm and learning rate"
    assert_same(runs["pure"][1], runs["fused"][1])


def test_gradient_accumulation_is_bit_identical_on_both_paths(kernels, tmp_path):
    """Stepper.grads summed over three microbatches, then Stepper.apply with its 1/count scale."""
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden, runs = int(cfg.model.hidden), {}
    for path in ("pure", "fused"):
        s, mem, values = stepper(path, hidden), LaneMemory(lanes, hidden), []
        acc = None
        for i, prep in enumerate(batches[:12]):
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            v, carry, g = s.grads(inputs, targets, mem.read(prep, inputs["lane_decisions"].shape[0]))
            mem.write(prep, carry)
            acc = add_grads(acc, g)
            if i % 3 == 2:
                values.append(np.array(s.apply(acc, mx.array(1 / 3, dtype=mx.float32))))
                acc = None
            values.append(np.array(v))
        runs[path] = (np.array(values, dtype=object), state_of(s, mem))
    assert all(np.array_equal(a, b) for a, b in zip(runs["pure"][0], runs["fused"][0]))
    assert_same(runs["pure"][1], runs["fused"][1])


# the helper with the default split threshold (the weight gradients on it, these small products whole) and with
# none (every product split by rows, the scan by lanes, the gate gradients by columns, over both threads)
THREADS = {"one-thread": (False, None), "weight-gradients-on-a-helper": (True, None), "every-product-split": (True, 0)}


@pytest.mark.parametrize("decisions", [1, 7, 16, 33, 64], ids=lambda d: f"T{d}")
@pytest.mark.parametrize("hidden", [1, 16], ids=lambda h: f"hidden{h}")
@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
@pytest.mark.parametrize("gates", [1.0, 30.0], ids=["gates-as-built", "gates-saturated"])
@pytest.mark.parametrize("threads", list(THREADS))
def test_fused_gradients_are_the_written_out_ones_bit_for_bit(kernels, decisions, hidden, memory, gates, threads):
    rng = np.random.default_rng(decisions * 100 + hidden)
    inp, _ = lane_inputs(rng, decisions, [1, 2, 1, 3])
    mx.random.seed(decisions)
    model = RecurrentPolicy(F, A, hidden=hidden, memory=memory)
    model.gates.weight = model.gates.weight * gates
    model.gates.bias = model.gates.bias * gates
    inputs, t = to_mx(inp), targets_for(rng, len(inp["x"]))
    h0 = mx.array(rng.uniform(-1, 1, (1, hidden)).astype(np.float32))
    want = loss_and_grads(model, inputs, t, h0, 0.25)
    helper, split_min = THREADS[threads]
    step = (
        FusedStep(kernels, model, None, helper=helper)
        if split_min is None
        else FusedStep(kernels, model, None, helper=helper, split_min=split_min)
    )
    got = step.loss_and_grads(inputs, t, h0, 0.25)
    for a, b in zip(want[:3], got[:3]):
        assert np.array_equal(np.array(a), np.array(b))
    assert_same({k: np.array(v) for k, v in tree_flatten(want[3])}, {k: np.array(v) for k, v in tree_flatten(got[3])})


def run_without_compiler(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    """A tiny training run in a fresh process with no C++ compiler and an empty kernels cache."""
    from .conftest import TINY_TRAIN

    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "TCGEXP_KERNELS_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.train",
        f"dataset.root={tmp_path / 'data'}",
        *TINY_TRAIN,
        "trainer.epochs=1",
        *overrides,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)


def test_without_a_compiler_auto_runs_the_pure_step_and_says_why_in_one_line(tmp_path):
    done = run_without_compiler(tmp_path, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr[-2000:]
    said = [ln for ln in done.stdout.splitlines() if "trainer.kernels" in ln]
    assert said == [
        f"[train] pure MLX step (trainer.kernels=auto: no C++ compiler (CXX={tmp_path / 'no-such-compiler'} not found))"
    ], done.stdout
    assert json.loads((tmp_path / "run" / "result.json").read_text())["kernels"] == "pure"


def test_fused_without_a_compiler_is_one_error_naming_the_key(tmp_path):
    done = run_without_compiler(tmp_path, "trainer.kernels=fused", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert lines == [
        f"error: trainer.kernels=fused, but no C++ compiler (CXX={tmp_path / 'no-such-compiler'} "
        "not found); use trainer.kernels=auto or pure"
    ], done.stderr[-2000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_readme_install_without_a_compiler_trains_on_the_pure_step(tmp_path):
    """README's set-up command in a fresh virtual environment (system packages visible, so no downloads), with
    CC and CXX pointing at no compiler: the install succeeds (it compiles nothing) and a run takes the pure step."""
    from pathlib import Path

    from .conftest import TINY_TRAIN

    repo = Path(__file__).resolve().parents[2]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    missing = str(tmp_path / "no-such-compiler")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CC=missing, CXX=missing, TCGEXP_KERNELS_CACHE=str(tmp_path / "cache"))
    py = str(venv / "bin" / "python")
    done = subprocess.run(
        [py, "-m", "pip", "install", "-q", "-e", f"{repo}[test]"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    where = subprocess.run(
        [py, "-c", "import tcgexp; print(tcgexp.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.strip() == str(repo / "tcgexp" / "__init__.py")
    run = subprocess.run(
        [
            py,
            "-m",
            "tcgexp.train",
            f"dataset.root={tmp_path / 'data'}",
            *TINY_TRAIN,
            "trainer.epochs=1",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"[train] pure MLX step (trainer.kernels=auto: no C++ compiler (CXX={missing} not found))" in run.stdout
    assert json.loads((tmp_path / "run" / "result.json").read_text())["kernels"] == "pure"


def test_the_installed_nanobind_speaks_mlxs_nanobind_abi():
    """MLX's bindings and tcgexp's must share nanobind's internals (else every call fails with 'incompatible
    function arguments'): the tag read from MLX's module equals the installed nanobind's."""
    from tcgexp.kernels import build

    mlx_dir, _ = build._mlx()
    nb_dir, _ = build._nanobind()
    assert build.mlx_nanobind_abi(mlx_dir) == build.nanobind_abi(nb_dir) != "unknown"


@pytest.mark.parametrize("hidden", [64, 128, 256, 1024], ids=lambda h: f"hidden{h}")
def test_the_fused_pass_shares_two_cores_unless_the_user_set_mkls_threads(kernels, hidden, monkeypatch):
    """On two cores or more, at any width, the fused step shares its pass with a helper thread and MKL runs one
    thread (the kernels split the products themselves); its line says so. The pure path keeps MKL's threads fit to
    the width. Where the user set MKL_NUM_THREADS (fit_threads gives None), the fused pass stays on one thread."""
    from tcgexp.learn import blas
    from tcgexp.learn.fused_step import choose

    want = len(os.sched_getaffinity(0)) >= 2 and blas._MKL is not None and not blas._USER_THREADS
    assert blas.spare_core() is want
    model = RecurrentPolicy(F, A, hidden=hidden, memory=True)
    step, line = choose("fused", model, None, helper=blas.spare_core())
    assert step.helper is want and ("on two threads" in line) is want, line
    if blas._MKL is not None and not blas._USER_THREADS:
        try:
            assert blas.fit_threads(hidden, shared=True) == 1
            assert blas.fit_threads(hidden) == blas.mkl_threads(hidden)
        finally:
            blas.fit_threads(128)
    monkeypatch.setattr(blas, "_USER_THREADS", True)
    assert blas.spare_core() is False and blas.fit_threads(hidden, shared=True) is None
