"""``hydra/sweeper=halving``: Hydra finds sweepers in the ``hydra_plugins`` namespace only, so the class lives
here; the work is in ``tcgexp.sweep`` (imported when a sweep starts, not when Hydra scans its plugins)."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class HalvingSweeper(Sweeper):
    """Successive halving over Optuna (``tcgexp.sweep``): settings in ``tcgexp.sweep.config``."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.search = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from tcgexp.sweep.sweeper import HalvingSearch

        self.search = HalvingSearch(
            self.settings, hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        assert self.search is not None, "setup() first"
        return self.search.sweep(arguments)
