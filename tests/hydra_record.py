"""A test-only Hydra callback: what each job's task function returned, one JSON line per job.

+hydra.callbacks.record._target_=tests.hydra_record.RecordReturns +hydra.callbacks.record.path=<file>
"""

from __future__ import annotations

import json
from typing import Any

from hydra.experimental.callback import Callback


class RecordReturns(Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        with open(self.path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "num": config.hydra.job.num,
                        "metric": config.optimized_metric,
                        "value": job_return.return_value,
                        "dir": config.hydra.runtime.output_dir,
                    }
                )
                + "\n"
            )
