"""What a run checks before any work: the memory a model needs, validation, where its stops lie.

``tcgexp.schema.validate`` judges each key alone; these checks need the
job's memory limit (``memneed``), the knobs together or the built corpus (whether the
validation split has rows), and each one would otherwise surface late: an
OOM kill with no message, or ``KeyError: 'loss'`` after a whole epoch. Where
its outputs land is checked where the run folder is claimed (``rundir.py``).
"""

from __future__ import annotations

from omegaconf import DictConfig

from ..errors import ConfigError
from ..eval.config import plays_at_end
from ..learn.batch import largest_padding
from .memneed import check_memory, model_bytes  # noqa: F401 - where callers have found them


def planned_slots(planner) -> int:
    """The most (lane x decision) slots a microbatch of the first epoch or of validation pads to (later
    epochs reshuffle the same chunks), each plan padded to the decision width it was planned with."""
    return max(largest_padding(plan, plan.width) for plan in (planner.epoch_plan(0), planner.validation_plan()))


def preflight(cfg: DictConfig) -> None:
    """``train()``'s checks after ``validate`` and before anything is built or written (its folder is checked
    where it is claimed: ``rundir.claim``)."""
    # every epoch ends with a validation pass (best/, val/* and the sweeper's metric come from it): a run
    # without one is refused, not run with validation silently off
    if float(cfg.dataset.val_fraction) <= 0.0:
        raise ConfigError(
            f"dataset.val_fraction={cfg.dataset.val_fraction} leaves no validation episodes, and "
            "every epoch ends with validation: set dataset.val_fraction > 0 (e.g. 0.1)"
        )
    check_stop_at(cfg)
    check_memory(cfg)
    check_eval(cfg)
    check_init_from(cfg)


def network_of(cfg: DictConfig) -> dict:
    """This run's network as a checkpoint records it (``init_from.network``)."""
    from ..games.registry import game, model_dims
    from ..lifecycle.init_from import network

    g = game(cfg.dataset.game)
    return network(cfg, g, model_dims(g, int(cfg.dataset.max_options)))


def check_init_from(cfg: DictConfig) -> None:
    """``init_from``'s checkpoint is whole and a network of this run's shape, before the corpus is built (a
    resume reads its own checkpoint instead: the parent's weights are in it)."""
    if cfg.init_optimizer and not cfg.init_from:
        raise ConfigError(
            "init_optimizer=true carries the optimizer of init_from's checkpoint, and init_from is not set: "
            "set init_from=<run dir or checkpoint dir>, or drop init_optimizer"
        )
    if cfg.init_from and not cfg.resume:
        from ..lifecycle.init_from import Parent

        Parent.read(cfg.init_from).check(network_of(cfg))


def check_eval(cfg: DictConfig) -> None:
    """A run that plays at its end (``plays_at_end``: eval.enabled, or left null on imported episodes) can play:
    the real game, the engine here, its deck and opponents exist; refused now rather than after training."""
    if not plays_at_end(cfg):
        return
    from ..config import build

    build(cfg.eval)().check(cfg)


def check_stop_at(cfg: DictConfig, done_epochs: int = 0, done_steps: int = 0) -> None:
    """``trainer.stop_at_epoch`` must lie ahead of the run: inside ``trainer.epochs`` (the schedule's horizon)
    and past the epochs a resumed checkpoint has done already (else it would train an epoch too many);
    ``trainer.max_steps`` past the optimizer steps it has done (a resume of a run that stopped there,
    with the same max_steps from its overrides, used to train one step more and stop again)."""
    stop_at, epochs, max_steps = int(cfg.trainer.stop_at_epoch), int(cfg.trainer.epochs), int(cfg.trainer.max_steps)
    if max_steps and max_steps <= done_steps:
        raise ConfigError(
            f"trainer.max_steps={max_steps} but the checkpoint has done {done_steps} optimizer step(s) "
            f"already: set it above {done_steps}, or trainer.max_steps=0 to run to "
            f"trainer.epochs={epochs}"
        )
    if stop_at > epochs:
        raise ConfigError(
            f"trainer.stop_at_epoch={stop_at} is past trainer.epochs={epochs} (the schedule's "
            f"horizon): set it to at most {epochs}, or 0 to run all epochs"
        )
    if stop_at and stop_at <= done_epochs:
        raise ConfigError(
            f"trainer.stop_at_epoch={stop_at} but the checkpoint has done {done_epochs} epoch(s) "
            f"already: set it above {done_epochs}, or 0 to run to trainer.epochs={epochs}"
        )


def check_val_rows(cfg: DictConfig, val_rows: int) -> None:
    """The built corpus's validation split, after planning and before the first step (not after an epoch)."""
    if val_rows <= 0:
        raise ConfigError(
            f"the validation split is empty (dataset.val_fraction={cfg.dataset.val_fraction} of "
            "too few episodes gives none): raise dataset.val_fraction or dataset.rows_per_day"
        )
