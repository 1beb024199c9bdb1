"""``python -m tcgexp.train [group=option ...] [key=value ...]``"""
import hydra
from omegaconf import DictConfig

from .. import config as _config  # noqa: F401  (registers the schemas)
from . import train
from .errors import USER_ERRORS


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        train(cfg)
    except USER_ERRORS as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
