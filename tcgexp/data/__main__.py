"""``tcgexp-data`` / ``python -m tcgexp.data``: build or validate the configured corpus days, clean them,
or publish them to an object store (``action=publish target=s3://bucket/prefix``)."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig
from rich.console import Console

from ..cli import CONFIG_PATH, job_errors, one_line_errors  # registers the --help resolver
from ..config import build
from ..progress import report_console, stage_progress
from .corpus import Corpus, DataAction, refuse_remote
from .errors import DataError


def run(cfg: DictConfig, console: Console | None = None) -> dict[str, str]:
    console = console or report_console()
    corpus: Corpus = build(cfg.dataset)
    if cfg.action == DataAction.publish:
        from .publish import publish

        return publish(corpus, cfg.target, cfg.dataset.storage, report=lambda line: console.print(
            f"[data] {line}", markup=False, soft_wrap=True))
    if corpus.remote:
        raise refuse_remote(corpus.root)
    if cfg.action == DataAction.clean:
        for date in corpus.dates:
            corpus.clean_derived(date)
            console.print(f"[data] {date}: derived files removed (replay ZIP kept)")
        return {d: "cleaned" for d in corpus.dates}
    progress, update = stage_progress()
    with progress:
        outcome = corpus.build(progress=update)
    for date, what in outcome.items():
        m = corpus.manifests[date]
        console.print(f"[data] {date}: {what}  rows={m['rows']} episodes={m['episodes']} "
                      f"row_groups={len(m['row_groups'])} train/val rows={m['split']['train_rows']}/"
                      f"{m['split']['val_rows']}  {corpus.paths(date).parquet}")
    return outcome


@one_line_errors(DataError)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="data")
def main(cfg: DictConfig) -> None:
    with job_errors(DataError):
        run(cfg)


if __name__ == "__main__":
    main()
