"""``tcgexp-sequence [sequence.key=value ...] [any training override ...]``: the daily sequence.

One training phase per day of ``sequence.days``, each continuing the canonical model, kill-safe at every step,
ending with the day-by-day table (``tcgexp/sequence/run.py`` says what each phase does, ``table.py`` how the
days are compared). The same command again continues a stopped sequence and skips the recorded days; with
more days listed it trains only the new ones.
"""

from __future__ import annotations

from omegaconf import DictConfig

from ..app import compose, hydra_main
from ..console import job_errors
from ..train.errors import USER_ERRORS


@hydra_main("sequence", *USER_ERRORS)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from ..learn.blas import setup

    setup()  # MKL before anything loads MLX (each phase's training run)
    from ..sequence.run import run_sequence

    with job_errors(*USER_ERRORS):
        run_sequence(cfg, list(HydraConfig.get().overrides.task), compose, console=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
