"""A run's submission for its game (``game.submission()``: the real game's is Kaggle's), written and checked:
``tcgexp-export``'s body (``tcgexp/cli/export.py``) and the daily sequence's ``sequence.export``."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..games import registry
from ..lifecycle.ckpt_files import CheckpointError
from ..lifecycle.weights import checkpoint_of, read_weights
from .config import eval_node
from .evaluate import get


def writer_for(name):
    """The submission writer of the game ``dataset.game`` names (``game.submission()``); a ConfigError in one line
    naming the games that have one."""
    make = getattr(registry.game(name), "submission", None) if registry.known(name) else None
    found = make() if callable(make) else None
    if found is None:
        have = [n for n, g in registry.GAMES.items() if callable(getattr(g, "submission", None)) and g.submission()]
        raise ConfigError(
            f"tcgexp-export writes the submission of a game that has one ({', '.join(have) or 'none'}), but this "
            f"run trained on dataset.game={name!r}"
        )
    return found


def export(run_dir: Path, folder: Path, overrides: list[str]) -> tuple[dict, list[str]]:
    """The run's submission written into `folder` and checked: (what was written, the lines that say it)."""
    from ..games.play import WeightsRefused

    node = eval_node(run_dir, overrides)
    ckpt = checkpoint_of(run_dir, node.checkpoint)
    weights, state = read_weights(ckpt)
    writer = writer_for(get(state.get("config") or {}, "dataset.game"))
    try:
        out = writer.write(Path(folder), weights, state, node, source=str(ckpt))
    except WeightsRefused as exc:
        raise CheckpointError(str(exc)) from None
    return out, writer.lines(out)
