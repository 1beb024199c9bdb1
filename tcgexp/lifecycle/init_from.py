"""``init_from=<run dir or checkpoint dir>``: a new run that starts from another run's weights.

Not ``resume=`` (the exact continuation of one run, which stays as it is): the run has its own corpus (new
days, another filter), its own schedule and, unless ``init_optimizer=true``, a fresh optimizer. What must
match is the network: the game, the model (its config node) and what the game sizes it by (``model_dims``),
and the meaning of the feature columns (the game's ``layout()``, where it has one, by digest). Anything else
is refused in one line naming both sides, before the corpus is built.

A run dir means its ``latest/`` (a finished run's last weights); any sealed checkpoint of it may be named
(``checkpoints/best``, ``checkpoints/epoch_0003``). The checkpoint is read whole and verified against its
checksums, so a damaged one is refused by name. The parent is recorded as one entry of the run's
``lineage`` (its checkpoint, run folder, the sha256 of its weights, its Aim run, its days), after the
parent's own lineage: every checkpoint's state.json, result.json and the Aim run hold it, so a model's
ancestry reads back to the run that started from scratch.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from omegaconf import DictConfig, OmegaConf

from ..overrides import shell_override
from .checkpoint import check_optimizer
from .ckpt_files import CheckpointError, _state, find, read_files

# MLX's own entries of an optimizer's state: the step counter and the rate it gives; a carried optimizer keeps
# its moments only, so the new schedule starts at its own step 0
COUNTERS = ("step", "learning_rate")


def features_digest(game) -> str | None:
    """The sha256 of what the game says its feature columns mean (``layout()``), or None for a game that
    does not say (then only the widths are compared)."""
    layout = getattr(game, "layout", None)
    if not callable(layout):
        return None
    return hashlib.sha256(json.dumps(layout(), sort_keys=True, default=str).encode()).hexdigest()


def network(cfg: DictConfig, game, dims: dict) -> dict:
    """What a checkpoint's weights are a network of: its game, model config, sizes and feature layout."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return {
        "game": game.name,
        "dataset": str(cfg.dataset.get("name", "")),
        "max_options": cfg.dataset.get("max_options"),
        "model": {k: v for k, v in model.items() if k != "_partial_"},
        "dims": {k: int(v) for k, v in dims.items()},
        "features": features_digest(game),
    }


def recorded_network(state: dict) -> dict | None:
    """A checkpoint's network: as recorded, or (written before it was) derived from its config."""
    if isinstance(state.get("network"), dict):
        return state["network"]
    from ..games.registry import game, known, model_dims

    config = state.get("config") or {}
    data, model = config.get("dataset") or {}, config.get("model") or {}
    name = data.get("game")
    if not name:
        return None
    dims = model_dims(game(name), int(data.get("max_options") or 0)) if known(name) else None
    return {
        "game": name,
        "dataset": str(data.get("name", "")),
        "max_options": data.get("max_options"),
        "model": {k: v for k, v in model.items() if k != "_partial_"},
        "dims": dims,
        "features": None,
    }


def _said(dims: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (dims or {}).items())


def differences(there: dict, here: dict) -> tuple[list[str], list[str]]:
    """(what differs between the checkpoint's network and this run's, the overrides that would match it)."""
    if there["game"] != here["game"]:
        return (
            [
                f"it is a network of dataset.game={there['game']} (dataset={there['dataset']}), this run's data is "
                f"of dataset.game={here['game']} (dataset={here['dataset']}): one game's network cannot start "
                "another's"
            ],
            [shell_override("dataset", there["dataset"])],
        )
    diffs, fix = [], []
    for key in sorted(set(there["model"]) | set(here["model"])):
        a, b = there["model"].get(key), here["model"].get(key)
        if a != b:
            diffs.append(f"model.{key} is {a!r} there, {b!r} here")
            fix.append(shell_override(f"model.{key}", a))
    if there.get("dims") is not None and there["dims"] != here["dims"]:
        diffs.append(
            f"its input and head are {_said(there['dims'])} (dataset.max_options={there['max_options']}), this "
            f"run's {_said(here['dims'])} (dataset.max_options={here['max_options']})"
        )
        if there["max_options"] != here["max_options"]:
            fix.append(shell_override("dataset.max_options", there["max_options"]))
    if None not in (there.get("features"), here["features"]) and there["features"] != here["features"]:
        diffs.append(
            f"the game's feature columns meant other things when it trained (layout digest {there['features'][:12]}, "
            f"this code's {here['features'][:12]}): its weights would read other inputs"
        )
    return diffs, fix


def entry_of(path: Path, state: dict, files: dict[str, bytes]) -> dict:
    """What a run records of the checkpoint it started from."""
    folder = path.parent.parent if path.parent.name == "checkpoints" else None
    progress = state.get("progress") or {}
    return {
        "checkpoint": str(path.resolve()),
        # the run that wrote it: its folder, or (a copy elsewhere, such as a sequence's canonical model) as it says
        "run_dir": str(folder.resolve()) if folder is not None else state.get("run_dir"),
        "weights_sha256": hashlib.sha256(files["model.safetensors"]).hexdigest(),
        "aim_hash": state.get("aim_hash"),
        "game": (recorded_network(state) or {}).get("game"),
        "dates": list((state.get("provenance") or {}).get("dates") or []),
        "epochs_done": progress.get("epoch"),
        "optimizer_steps": progress.get("opt_steps"),
    }


@dataclass
class Parent:
    """The checkpoint a run starts from: read whole, verified, and checked against this run's network."""

    given: str  # as typed (the messages name it)
    path: Path
    state: dict
    files: dict[str, bytes]

    @classmethod
    def read(cls, init_from: str) -> Parent:
        path = find(str(init_from), key="init_from")
        try:
            path, files = read_files(path)
            state = _state(path, files)  # every file verified against checksums.json
        except CheckpointError as exc:  # the reader's advice is a resume's; say it as this key's
            raise CheckpointError(
                f"init_from={init_from}: {str(exc).replace('resume from another', 'start from another')}"
            ) from None
        return cls(str(init_from), path, state, files)

    @property
    def lineage(self) -> list[dict]:
        """This run's ancestry, the run that started from scratch first and this checkpoint last."""
        before = self.state.get("lineage")
        return [*(before if isinstance(before, list) else []), entry_of(self.path, self.state, self.files)]

    def check(self, here: dict) -> None:
        """Refuse a checkpoint whose network is not this run's (`here`: ``network()`` of this run)."""
        there = recorded_network(self.state)
        if there is None:
            raise CheckpointError(
                f"init_from={self.given}: {self.path / 'state.json'} does not say which game or model it is a "
                "network of (no config recorded); start from a checkpoint tcgexp-train wrote"
            )
        diffs, fix = differences(there, here)
        if diffs:
            raise CheckpointError(
                f"init_from={self.given}: the checkpoint's network is not this run's: {'; '.join(diffs)}; "
                + (f"run with {' '.join(fix)}, or " if fix else "")
                + "start from a checkpoint of this network (or from scratch: drop init_from)"
            )

    def restore(self, model, optimizer, *, carry_optimizer: bool) -> None:
        """The parent's weights into `model` (and its optimizer's moments, when carried: not its step count)."""
        params = self._tensors("model.safetensors")
        expected = dict(tree_flatten(model.parameters()))
        if set(params) != set(expected) or any(params[k].shape != expected[k].shape for k in expected):
            raise CheckpointError(
                f"init_from={self.given}: {self.path / 'model.safetensors'} does not match the configured model "
                "(its parameters' names or shapes differ)"
            )
        for name, value in params.items():
            if not bool(mx.all(mx.isfinite(value)).item()):
                raise CheckpointError(
                    f"init_from={self.given}: {self.path / 'model.safetensors'}: parameter {name} holds NaN or "
                    "infinity; start from another checkpoint"
                )
        model.update(tree_unflatten(list(params.items())))
        if carry_optimizer:
            fresh = dict(tree_flatten(optimizer.state))
            saved = {k: v for k, v in self._tensors("optimizer.safetensors").items() if k not in COUNTERS}
            try:
                check_optimizer(saved, {k: v for k, v in fresh.items() if k not in COUNTERS}, self.path)
            except CheckpointError as exc:
                raise CheckpointError(
                    f"init_from={self.given} with init_optimizer=true: {exc}".replace(
                        "resume with the optimizer", "run with the optimizer"
                    )
                ) from None
            optimizer.state = tree_unflatten(list({**fresh, **saved}.items()))
        mx.eval(model.parameters(), optimizer.state)

    def _tensors(self, name: str) -> dict:
        try:
            return mx.load(io.BytesIO(self.files[name]), format="safetensors")
        except Exception as exc:  # safetensors parse errors have no common base class
            raise CheckpointError(
                f"init_from={self.given}: {self.path / name} is damaged ({type(exc).__name__}: {exc}); start from "
                "another checkpoint"
            ) from exc
