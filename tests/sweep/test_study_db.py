"""The study database: every wait on it bounded, every failure of it named as what it is."""

from __future__ import annotations

import json
import time

import pytest

from tcgexp.bench.loopback_s3 import silent_server
from tcgexp.sweep import dbbounds
from tests.sweep.test_space import SPACE, sweep_error


def ours(folder) -> None:
    """A sweep folder an earlier tcgexp sweep made (its marker)."""
    folder.mkdir()
    (folder / ".tcgexp-sweep").write_text(json.dumps({"kind": "tcgexp-sweep", "pid": 1, "host": "elsewhere"}))


def test_a_damaged_optuna_db_is_named_damaged_with_the_fix(monkeypatch, tmp_path):
    ours(tmp_path / "sweep")
    (tmp_path / "sweep" / "optuna.db").write_bytes(b"\x00garbage that is no SQLite file" * 100)
    line = sweep_error(monkeypatch, tmp_path, SPACE)
    assert "optuna.db is damaged" in line and "restore it from a copy" in line and "new hydra.sweep.dir" in line
    assert "password" not in line and "server" not in line, line


@pytest.mark.slow
@pytest.mark.extra("sweep")
@pytest.mark.parametrize(
    "scheme, bound",
    [
        ("mysql+pymysql", dbbounds.CONNECT_TIMEOUT_S + dbbounds.READ_TIMEOUT_S),
        ("postgresql+psycopg", dbbounds.CONNECT_TIMEOUT_S),
    ],
    ids=["mysql", "postgresql"],
)
def test_a_database_server_that_accepts_and_never_answers_is_one_line_within_its_bound(
    monkeypatch, tmp_path, scheme, bound
):
    with silent_server() as endpoint:
        host = endpoint.split("://", 1)[1]
        t0 = time.monotonic()
        line = sweep_error(monkeypatch, tmp_path, SPACE, f"hydra.sweeper.storage={scheme}://u:secret@{host}/study")
        waited = time.monotonic() - t0
    assert waited < bound + 10, waited
    assert "cannot open the study database" in line and "secret" not in line and host in line, line


@pytest.mark.extra("sweep")
def test_a_call_the_driver_does_not_bound_is_ended_by_the_deadline():
    """PyMySQL without a read timeout waits for a silent server's greeting for ever; the deadline ends it."""
    import pymysql

    with silent_server() as endpoint:
        host, port = endpoint.split("://", 1)[1].split(":")
        t0 = time.monotonic()
        with (
            pytest.raises(dbbounds.StudyUnanswered, match="did not answer a call within 1 s") as err,
            dbbounds.deadline(1, "hydra.sweeper.storage=mysql://..."),
        ):
            pymysql.connect(host=host, port=int(port), connect_timeout=5)
        assert time.monotonic() - t0 < 3
    assert "\n" not in str(err.value) and "the same command" in str(err.value)
    import signal

    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0 and signal.getsignal(signal.SIGALRM) in (
        signal.SIG_DFL,
        None,
    ), "the alarm and its handler are put back"
