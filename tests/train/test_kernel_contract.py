"""The kernels' contract, their build and where they cannot be had.

The contract is by name: each wrong field of a call (misnamed, missing, unexpected, of another dtype
or shape, not an array) is refused naming it, and the same fields in another order give the same bits.
The build key changes with any source. And where the kernels cannot be had: ``auto`` runs the pure
step saying why in one line, ``fused`` is one error naming the key. (That the fused step computes what
the pure step does, bit for bit: test_kernels.py.)
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

from tcgexp.learn.losses import METRICS
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.scan import SCAN_BLOCK
from tcgexp.learn.step import to_mx

from .test_backprop import option_case, option_model, targets_for
from .test_kernels import assert_same
from .test_model import A, F, lane_inputs

# -- the kernels' contract: every field by name, checked at the call ---------------------------------------------


def grads_call(hidden: int = 16, decisions: int = 7) -> dict:
    """A valid grads() call's keyword arguments."""
    rng = np.random.default_rng(0)
    inp, _ = lane_inputs(rng, decisions, [1, 2, 1, 3])
    mx.random.seed(0)
    model = RecurrentPolicy(F, A, hidden=hidden, memory=True)
    targets = targets_for(rng, len(inp["x"]))
    del targets["row_early"]  # what only evaluation reads
    return {
        "inputs": {**to_mx(inp), "h0": mx.array(rng.uniform(-1, 1, (1, hidden)).astype(np.float32))},
        "targets": targets,
        "params": dict(tree_flatten(model.trainable_parameters())),
        "metrics": METRICS,
        "memory": True,
        "block": SCAN_BLOCK,
        "aux_weight": 0.25,
    }


def option_grads_call(hidden: int = 16, decisions: int = 7) -> dict:
    """A valid grads() call of the option head."""
    rng = np.random.default_rng(0)
    inp, t = option_case(rng, decisions, [1, 2, 1, 3])
    del t["row_early"]
    model = option_model(hidden)
    return {
        "inputs": {**to_mx(inp), "h0": mx.array(rng.uniform(-1, 1, (1, hidden)).astype(np.float32))},
        "targets": to_mx(t),
        "params": dict(tree_flatten(model.trainable_parameters())),
        "metrics": model.metrics,
        "memory": True,
        "block": SCAN_BLOCK,
        "aux_weight": 0.25,
        "options": True,
    }


def numbers(out: dict) -> dict:
    return {
        "values": np.array(out["values"]),
        "carry": np.array(out["carry"]),
        **{f"grads {k}": np.array(v) for k, v in out["grads"].items()},
    }


def test_the_kernels_declare_what_grads_reads_and_the_fused_step_passes_exactly_that(kernels):
    contract = kernels.grads_contract()
    call = grads_call()
    assert set(contract) == {"inputs", "targets", "params", "outputs"}
    assert set(contract["inputs"]) == set(call["inputs"]) and set(contract["targets"]) == set(call["targets"])
    assert set(contract["params"]) == set(call["params"])
    assert contract["targets"]["action_mask"] == "bool [R, A]" and contract["params"]["gates.weight"] == (
        "float32 [2H, H+C]"
    )
    assert "policy.weight" in contract["params"] and "options" not in contract["inputs"]


def test_the_option_heads_contract_is_its_own_fields(kernels):
    """options=True declares the option head's inputs, targets and parameters, and no action head's."""
    contract = kernels.grads_contract(options=True)
    call = option_grads_call()
    assert set(contract["inputs"]) == set(call["inputs"]) and set(contract["targets"]) == set(call["targets"])
    assert set(contract["params"]) == set(call["params"]) and "policy.weight" not in contract["params"]
    assert contract["inputs"]["options"] == "float32 [R, A, O]" and contract["inputs"]["pick"] == "int32 [R]"
    assert contract["params"]["stop.weight"] == "float32 [1, 2H]"
    assert {"policy_weight", "stop_target", "stop_valid"} <= set(contract["targets"])


def test_the_same_fields_in_any_order_give_the_same_bits(kernels):
    """By name, not by position: each dict reversed, the metrics asked for in another order."""
    call = grads_call()
    want = numbers(kernels.grads(**call))
    shuffled = {
        **call,
        **{k: dict(reversed(list(call[k].items()))) for k in ("inputs", "targets", "params")},
        "metrics": tuple(reversed(METRICS)),
    }
    got = numbers(kernels.grads(**shuffled))
    assert np.array_equal(got.pop("values"), want.pop("values")[::-1])
    assert_same(want, got)
    assert set(kernels.grads(**shuffled)["grads"]) == set(call["params"]), "keyed as the parameters"


def _rename(d: dict, old: str, new: str) -> None:
    d[new] = d.pop(old)


# (what is wrong, how, the error it must be refused with: each names the field)
GRADS_REFUSED = {
    "a-misnamed-target": (
        lambda c: _rename(c["targets"], "aux_prize_delta", "aux_prize"),
        r'grads: targets\["aux_prize"\] is not a field of grads \(targets: action_mask, label, .*\); '
        r'missing: targets\["aux_prize_delta"\]',
    ),
    "a-missing-input": (lambda c: c["inputs"].pop("h0"), r'^grads: inputs\["h0"\] is missing$'),
    "an-extra-parameter": (
        lambda c: c["params"].update({"memory.weight": mx.zeros((16, 16))}),
        r'^grads: params\["memory.weight"\] is not a field of grads \(params: encoder.layers.0.weight, ',
    ),
    "a-target-of-the-wrong-dtype": (
        lambda c: c["targets"].update(label=c["targets"]["label"].astype(mx.float32)),
        r'^grads: targets\["label"\] is float32, expected int32$',
    ),
    "a-mask-of-the-wrong-dtype": (
        lambda c: c["targets"].update(action_mask=c["targets"]["action_mask"].astype(mx.float32)),
        r'^grads: targets\["action_mask"\] is float32, expected bool$',
    ),
    "a-target-of-the-wrong-length": (
        lambda c: c["targets"].update(row_weight=mx.ones(c["targets"]["row_weight"].shape[0] + 1)),
        r'^grads: targets\["row_weight"\] has shape \((\d+),\), expected \[R=\d+\]; R from inputs\["x"\]$',
    ),
    "a-flattened-input": (
        lambda c: c["inputs"].update(label_hot=c["inputs"]["label_hot"].reshape(-1, A)),
        r'^grads: inputs\["label_hot"\] has shape \(7, \d+\), expected \[L=1, T=7, C\]; L from inputs\["first_row"\]',
    ),
    "a-parameter-of-the-wrong-shape": (
        lambda c: c["params"].update({"gates.weight": c["params"]["gates.weight"][:, 1:]}),
        r'^grads: params\["gates.weight"\] has shape \(32, \d+\), expected \[2H=32, H\+C=\d+\]',
    ),
    "not-an-mx-array": (
        lambda c: c["targets"].update(label=np.array(c["targets"]["label"])),
        r'^grads: targets\["label"\] is numpy.ndarray, expected an mx.array$',
    ),
    "an-unknown-metric": (
        lambda c: c.update(metrics=(*METRICS[:-1], "aux_returns")),
        r'^grads: metrics has "aux_returns", which the loss does not compute \(it computes loss, policy, ',
    ),
    "a-stop-metric-of-the-action-head": (
        lambda c: c.update(metrics=(*METRICS, "stop")),
        r'^grads: metrics has "stop", which the loss does not compute \(it computes .*aux_return; the stop '
        r"head's with options=True\)$",
    ),
    "the-action-heads-fields-on-the-option-head": (
        lambda c: c.update(options=True),
        r'^grads: params\["policy.weight"\] is not a field of grads \(params: .*option.weight.*\); missing: '
        r'inputs\["options"\]$',
    ),
}


@pytest.mark.parametrize("wrong", list(GRADS_REFUSED))
def test_grads_refuses_a_wrong_field_naming_it(kernels, wrong):
    call = grads_call()
    change, message = GRADS_REFUSED[wrong]
    change(call)
    with pytest.raises(ValueError, match=message):
        kernels.grads(**call)


def adamw_call() -> dict:
    """A valid clip_adamw() call's keyword arguments: two parameters, a and b."""
    shapes = {"a": (2,), "b": (3, 2)}
    group = {
        k: {n: mx.full(s, i + 1.0) for n, s in shapes.items()} for i, k in enumerate(("grads", "params", "m", "v"))
    }
    return {
        **group,
        "learning_rate": mx.array(0.1),
        "grad_clip": 1.0,
        "beta1": 0.9,
        "beta2": 0.999,
        "eps": 1e-8,
        "weight_decay": 0.01,
    }


ADAMW_REFUSED = {
    "a-missing-moment": (lambda c: c["m"].pop("b"), r'^clip_adamw: m\["b"\] is missing$'),
    "a-parameter-without-a-gradient": (
        lambda c: c["params"].update(c=mx.zeros(1)),
        r'^clip_adamw: params\["c"\] is not a field of clip_adamw \(params: a, b\)$',
    ),
    "a-moment-of-another-shape": (
        lambda c: c["v"].update(a=mx.zeros(3)),
        r'^clip_adamw: v\["a"\] has shape \(3,\), expected \(2,\) \(as grads\["a"\]\)$',
    ),
    "a-half-precision-parameter": (
        lambda c: c["params"].update(b=c["params"]["b"].astype(mx.float16)),
        r'^clip_adamw: params\["b"\] is float16, expected float32$',
    ),
    "two-learning-rates": (
        lambda c: c.update(learning_rate=mx.array([0.1, 0.2])),
        r"^clip_adamw: learning_rate has shape \(2,\), expected one value$",
    ),
}


@pytest.mark.parametrize("wrong", list(ADAMW_REFUSED))
def test_clip_adamw_refuses_a_wrong_field_naming_it(kernels, wrong):
    call = adamw_call()
    mx.eval(kernels.clip_adamw(**call))  # the call as built is accepted
    change, message = ADAMW_REFUSED[wrong]
    change(call)
    with pytest.raises(ValueError, match=message):
        kernels.clip_adamw(**call)


def test_a_setting_is_a_keyword_and_none_is_positional(kernels):
    call = grads_call()
    with pytest.raises(TypeError):
        kernels.grads(call["inputs"], call["targets"], call["params"], METRICS, True, SCAN_BLOCK, 0.25)
    with pytest.raises(TypeError):
        kernels.grads(**{k: v for k, v in call.items() if k != "aux_weight"})


def test_the_build_key_changes_with_any_source(tmp_path, monkeypatch):
    """A changed kernel (or contract) is a new build: the cache key hashes every file in csrc/."""
    import shutil

    from tcgexp.kernels import build

    csrc = tmp_path / "csrc"
    shutil.copytree(build.CSRC, csrc)
    monkeypatch.setattr(build, "CSRC", csrc)
    mlx_dir, mlx_version = build._mlx()
    key = build.build_key("true", mlx_dir, mlx_version, "3")
    assert build.build_key("true", mlx_dir, mlx_version, "3") == key
    header = csrc / "fused.h"
    header.write_text(header.read_text() + "\n")
    assert build.build_key("true", mlx_dir, mlx_version, "3") != key


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
