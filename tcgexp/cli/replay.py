"""``tcgexp-replay`` / ``python -m tcgexp.bench.trace [group=option ...] [key=value ...]``: miss-ratio curves of a
configured plan's access trace (``tcgexp/bench/trace.py``, the library it drives).

Its root config (``base_replay``, ``ReplayConfig``) is declared in ``tcgexp.bench.trace``: importing that module,
as this one does before Hydra composes, is registering it (``app.py``).
"""

from __future__ import annotations

from omegaconf import DictConfig

from ..app import hydra_main
from ..bench.trace import replay_report
from ..console import job_errors
from ..data.errors import DataError


@hydra_main("replay", DataError)
def main(cfg: DictConfig) -> None:
    with job_errors(DataError):
        replay_report(cfg)


if __name__ == "__main__":
    main()
