"""`flinkpy restart-strategy`, run as operators run it: as a subprocess. No cluster is started."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import one_error_line, run_cli_in
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(60)


def flinkpy(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_in(home, *args, env={"COLUMNS": "200"})


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def test_explain_fixed_delay(home: Path) -> None:
    res = flinkpy(home, "restart-strategy", "explain", "fixed-delay", "--attempts", "2", "--delay", "10s")
    assert res.returncode == 0, res.stderr
    assert "fixed-delay (attempts=2, delay=10 s)" in res.stdout
    assert res.stdout.count("restart ") >= 2 and "give up" in res.stdout
    assert "Gives up at failure 3" in res.stdout and res.stderr == ""


def test_explain_failure_rate_json(home: Path) -> None:
    res = flinkpy(home, "restart-strategy", "explain", "failure-rate", "--max-failures", "2",
                  "--interval", "5s", "--delay", "1s", "--every", "1s", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["strategy"] == {"type": "failure-rate", "max-failures-per-interval": 2, "failure-rate-interval": 5000, "delay": 1000}
    assert doc["every_ms"] == 1000 and "after the previous restart" in doc["assumption"]
    # failures at 0, 2 s, 4 s: three inside 5 s
    assert [r["failure_ms"] for r in doc["schedule"]] == [0, 2000, 4000]
    assert doc["gives_up_at"] == 3


def test_explain_exponential_delay(home: Path) -> None:
    res = flinkpy(home, "restart-strategy", "explain", "exponentialdelay", "--initial-backoff", "1s",
                  "--max-backoff", "4s", "--multiplier", "2", "--jitter", "0.1", "--failures", "4", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = doc["schedule"]
    assert [r["delay_ms"] for r in rows] == [1000, 2000, 4000, 4000]
    assert (rows[0]["jitter_min_ms"], rows[0]["jitter_max_ms"]) == (900, 1100)
    assert doc["gives_up_at"] is None
    text = flinkpy(home, "restart-strategy", "explain", "exponential-delay", "--failures", "3")
    assert text.returncode == 0 and "0.900s .. 1.100s" in text.stdout and "Still restarting" in text.stdout


def test_explain_none(home: Path) -> None:
    res = flinkpy(home, "restart-strategy", "explain", "off")
    assert res.returncode == 0 and "Gives up at failure 1" in res.stdout


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["sometimes"], ExitCode.USAGE, "unknown restart strategy type"),
        (["fixed-delay", "--attempts", "many"], ExitCode.USAGE, "--attempts"),
        (["fixed-delay", "--delay", "soon"], ExitCode.USAGE, "duration"),
        (["fixed-delay", "--jitter", "0.1"], ExitCode.USAGE, "does not apply"),
        (["none", "--attempts", "1"], ExitCode.USAGE, "takes no options"),
        (["exponential-delay", "--jitter", "1.5"], ExitCode.USAGE, "from 0 to 1"),
        (["exponential-delay", "--multiplier", "0.5"], ExitCode.USAGE, "--multiplier"),
        (["exponential-delay", "--every", "later"], ExitCode.USAGE, "--every"),
        (["exponential-delay", "--initial-backoff", "2min", "--max-backoff", "1min"], ExitCode.CONFIGURATION, "max-backoff"),
    ],
)
def test_explain_bad_values(home: Path, args: list[str], code: int, words: str) -> None:
    assert words in one_error_line(flinkpy(home, "restart-strategy", "explain", *args), code)


def test_json_error_is_one_document(home: Path) -> None:
    res = flinkpy(home, "restart-strategy", "explain", "fixed-delay", "--delay", "soon", "--json")
    assert res.returncode == ExitCode.USAGE
    assert json.loads(res.stdout)["error"]["exit_code"] == ExitCode.USAGE


def test_show_and_set_without_a_cluster_exit_3(home: Path) -> None:
    one_error_line(flinkpy(home, "restart-strategy", "show", "abc"), ExitCode.UNREACHABLE)
    one_error_line(flinkpy(home, "restart-strategy", "set", "abc", "fixed-delay", "--attempts", "3"), ExitCode.UNREACHABLE)
    # nothing listens on port 1 of loopback
    one_error_line(flinkpy(home, "restart-strategy", "show", "-m", "127.0.0.1:1", "abc"), ExitCode.UNREACHABLE)


def test_set_validates_before_any_request(home: Path) -> None:
    # -m points nowhere: a bad value must be reported (2/8), not the missing cluster (3).
    one_error_line(flinkpy(home, "restart-strategy", "set", "-m", "127.0.0.1:1", "abc", "fixed-delay", "--attempts", "x"), ExitCode.USAGE)
    one_error_line(
        flinkpy(home, "restart-strategy", "set", "-m", "127.0.0.1:1", "abc", "exponential-delay", "--initial-backoff", "2h"),
        ExitCode.CONFIGURATION,
    )


@pytest.fixture
def stub_jobmanager():  # type: ignore[no-untyped-def]
    """A loopback HTTP server answering /jobs/<id>/restart-strategy like the JobManager documents it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"jid": "j1", "restart-strategy": {"type": "none"}, "restarts": 2, "history": []}
    puts: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            data = json.dumps(state).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._answer()

        def do_PUT(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            puts.append(body)
            from flinkpy.common.restart_backoff import strategy_from_config

            new = strategy_from_config(body["config"], checkpointing_enabled=False).describe()
            state["history"].append({"timestamp": 1_700_000_000_000, "from": state["restart-strategy"], "to": new})
            state["restart-strategy"] = new
            self._answer()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", puts
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_set_sends_full_flink_config_and_show_prints_it(home: Path, stub_jobmanager) -> None:  # type: ignore[no-untyped-def]
    address, puts = stub_jobmanager
    res = flinkpy(home, "restart-strategy", "set", "-m", address, "j1", "fixed-delay", "--attempts", "3", "--delay", "10s")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "Restart strategy of job j1 set to fixed-delay (attempts=3, delay=10 s)"
    assert puts == [{"config": {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "10 s",
    }}]
    res = flinkpy(home, "restart-strategy", "show", "-m", address, "j1")
    assert res.returncode == 0, res.stderr
    for expected in ("Restart strategy: fixed-delay", "attempts: 3", "delay: 10 s", "Restarts: 2", "none -> fixed-delay (attempts=3, delay=10 s)"):
        assert expected in res.stdout, res.stdout
    doc = json.loads(flinkpy(home, "restart-strategy", "show", "-m", address, "j1", "--json").stdout)
    assert doc["restart-strategy"] == {"type": "fixed-delay", "attempts": 3, "delay": 10000}
