"""``tcgexp-data`` / ``python -m tcgexp.data``: build or validate the configured corpus days, clean them,
or publish them to an object store (``action=publish target=s3://bucket/prefix``)."""

from __future__ import annotations

import time

from omegaconf import DictConfig
from rich.console import Console

from ..app import hydra_main
from ..config import build
from ..console import job_errors
from ..progress import report_console, stage_progress
from .corpus import Corpus, DataAction, refuse_remote
from .errors import DataError
from .publish import publish


def run(cfg: DictConfig, console: Console | None = None) -> dict[str, str]:
    console = console or report_console()
    corpus: Corpus = build(cfg.dataset)
    if cfg.action == DataAction.publish:
        return publish(
            corpus,
            cfg.target,
            cfg.dataset.storage,
            report=lambda line: console.print(f"[data] {line}", markup=False, soft_wrap=True),
        )
    if corpus.remote:
        raise refuse_remote(corpus.root)
    if cfg.action == DataAction["import"]:
        if not cfg.source:
            raise DataError("action=import needs source=<a folder or ZIP of episode JSONs>")
        summary, outcome = corpus.import_episodes(
            cfg.source, cfg.date, lambda line: console.print(f"[data] {line}", markup=False, soft_wrap=True)
        )
        mb = summary.bytes / 1e6
        rate = (
            f"{sum(summary.imported.values()) / max(summary.seconds, 1e-9):.1f} episodes/s, " if summary.seconds else ""
        )
        console.print(
            f"[data] import: {sum(summary.imported.values())} episodes filed into {len(summary.imported)} days, "
            f"{summary.duplicates} seen before (skipped), {len(summary.refused)} refused; {mb:.1f} MB of JSON "
            f"in {summary.seconds:.1f} s ({rate}{mb / max(summary.seconds, 1e-9):.1f} MB/s)",
            markup=False,
            soft_wrap=True,
        )
        for line in summary.refused:
            console.print(f"[data] refused: {line}", markup=False, soft_wrap=True)
        for date, what in outcome.items():
            m = corpus.manifests[date]
            console.print(
                f"[data] {date}: {what}  rows={m['rows']} episodes={m['episodes']} row_groups={len(m['row_groups'])} "
                f"{corpus.paths(date).parquet}",
                markup=False,
                soft_wrap=True,
            )
        return outcome
    if cfg.action == DataAction.clean:
        for date in corpus.dates:
            corpus.clean_derived(date)
            console.print(f"[data] {date}: derived files removed (replay ZIP kept)")
        return {d: "cleaned" for d in corpus.dates}
    progress, update = stage_progress()
    t0 = time.perf_counter()

    def day_done(date: str, what: str, done: int, total: int) -> None:  # as each day is finished, not at the end
        m = corpus.manifests[date]
        count = f" ({done}/{total}, {time.perf_counter() - t0:.0f} s)" if total > 1 else ""
        console.print(
            f"[data] {date}: {what}{count}  rows={m['rows']} episodes={m['episodes']} "
            f"row_groups={len(m['row_groups'])} train/val rows={m['split']['train_rows']}/"
            f"{m['split']['val_rows']}  {corpus.paths(date).parquet}"
        )

    with progress:
        return corpus.build(progress=update, max_new_days=int(cfg.max_new_days), on_day=day_done)


@hydra_main("data", DataError)
def main(cfg: DictConfig) -> None:
    with job_errors(DataError):
        run(cfg)


if __name__ == "__main__":
    main()
