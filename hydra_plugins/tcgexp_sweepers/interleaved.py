"""``hydra/sweeper=interleaved``: Hydra's basic grid sweeper, its jobs in another order: seed 0 of every option,
then seed 1, and so on. Hydra's own runs the last override fastest, so ``cache=off,plan seed=0,1,2`` runs every
seed of ``off`` before the first of ``plan``; a machine that gets busier or quieter over the sweep (another
user, a warm page cache, thermal limits) then moves one option's throughput and not the other's, and the
paired per-seed differences carry that drift. Interleaved, each seed's jobs run side by side in time."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class InterleavedSweeper(Sweeper):
    """Hydra's ``BasicSweeper`` (held, not subclassed: Hydra's plugin scan may load its module again, and a
    subclass of the first load fails the second's ``super()``), ``seed`` made its slowest-varying override."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        self.basic = BasicSweeper(max_batch_size, params)
        split = type(self.basic).split_arguments

        def seed_major(overrides, batch_size):
            seeds = [o for o in overrides if o.get_key_element().lstrip("+~") == "seed"]
            return split(seeds + [o for o in overrides if o not in seeds], batch_size)

        self.basic.split_arguments = seed_major  # what BasicSweeper.sweep calls to order its jobs

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.basic.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.basic.sweep(arguments)
