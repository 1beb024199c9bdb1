"""``python -m tcgexp.train [group=option ...] [key=value ...]``"""
import hydra
from omegaconf import DictConfig

from .. import config as _config  # noqa: F401  (registers the schemas)
from . import train
from .errors import USER_ERRORS


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        train(cfg)
    except USER_ERRORS as exc:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # Hydra records the job as failed and the sweep goes on
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
