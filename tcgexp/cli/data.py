"""``tcgexp-data`` / ``python -m tcgexp.data``: build or validate the configured corpus days, clean them,
or publish them to an object store (``action=publish target=s3://bucket/prefix``)."""

from __future__ import annotations

import datetime as dt
import time

from omegaconf import DictConfig
from rich.console import Console

from ..app import hydra_main
from ..config import build
from ..console import job_errors
from ..data.corpus import Corpus, DataAction, refuse_remote
from ..data.errors import DataError
from ..data.publish import publish
from ..progress import report_console, stage_progress


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
        progress, update = stage_progress()
        with progress:  # files read so far (a folder's or a ZIP's count is not known before it is read)
            summary, outcome = corpus.import_episodes(
                cfg.source,
                cfg.date,
                lambda line: console.print(f"[data] {line}", markup=False, soft_wrap=True),
                lambda done: update("import: files read", done, None),
            )
        mb = summary.bytes / 1e6
        filed = sum(summary.imported.values())
        rate = f"{filed / max(summary.seconds, 1e-9):.1f} episodes/s, " if summary.seconds else ""
        console.print(
            f"[data] import: {filed} episodes ({summary.rounds} rounds) filed into {len(summary.imported)} "
            f"day{'' if len(summary.imported) == 1 else 's'}, "
            f"{summary.duplicates} seen before (skipped), {len(summary.refused)} refused; {mb:.1f} MB of JSON "
            f"in {summary.seconds:.1f} s ({rate}{mb / max(summary.seconds, 1e-9):.1f} MB/s)",
            markup=False,
            soft_wrap=True,
        )
        if filed and summary.dated < filed:
            into = cfg.date or f"today (UTC), {dt.datetime.now(dt.UTC).date().isoformat()}"
            console.print(
                f"[data] {filed - summary.dated} of them carry no date of their own (no sidecar with an endTime): "
                f"filed into {into}; give date=YYYY-MM-DD for the day they were played",
                markup=False,
                soft_wrap=True,
            )
        if summary.failed:
            console.print(
                f"[data] {summary.failed} of them ended in ERROR, INVALID or TIMEOUT: their decisions before the "
                "failing answer are rows, the failing answer is not, and their result trains no return target",
                markup=False,
                soft_wrap=True,
            )
        for line in summary.refused:
            console.print(f"[data] refused: {line}", markup=False, soft_wrap=True)
        for date, what in outcome.items():
            m = corpus.manifests[date]
            why = " (its episodes were filed by an import that was stopped before building it)"
            console.print(
                f"[data] {date}: {what}{why if date in summary.resumed else ''}  rows={m['rows']} "
                f"episodes={m.get('matches', m['episodes'])} rounds={m['episodes']} "
                f"row_groups={len(m['row_groups'])} {corpus.paths(date).parquet}",
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
