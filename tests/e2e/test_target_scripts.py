"""The target scripts' server bookkeeping (``targets/target-common.sh``, sourced by the
vLLM, SGLang and llama.cpp scripts): one PID file a port, a stop that only stops the
server of its own port, and a ``status`` whose exit says whether the server answers.

The server here is a small HTTP server started by a script that sources
``target-common.sh`` exactly as the target scripts do, so that two of them on two ports
of one install folder start in seconds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from probe_servers import free_port
from repo_paths import TARGETS

SERVER = """import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Health).serve_forever()
"""
SCRIPT = """set -euo pipefail
DIR=$1; PORT=$2; LABEL=test-server
. "{common}"
case $3 in
  start) pid_start python3 -c "$SERVE" --port "$PORT" ;;
  stop) pid_stop ;;
  status) pid_status ;;
esac
"""


@pytest.fixture
def target(tmp_path: Path):
    """``target(port, verb)``: the script's verb on ``port`` of one install folder."""
    script = tmp_path / "target.sh"
    script.write_text(SCRIPT.replace("{common}", str(TARGETS / "target-common.sh")))
    install = tmp_path / "install"
    started: list[int] = []

    def run(port: int, verb: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", str(script), str(install), str(port), verb],
            env={"PATH": "/usr/bin:/bin", "SERVE": SERVER},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if verb == "start":
            started.append(port)
        return done

    yield run, install
    for port in started:
        run(port, "stop")


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_two_servers_of_one_install_start_check_and_stop_independently(target) -> None:
    run, install = target
    a, b = free_port(), free_port()
    assert run(a, "status").returncode == 1
    assert run(a, "start").returncode == 0
    assert run(b, "start").returncode == 0  # not "already running": another port
    assert answers(a) and answers(b)
    assert sorted(p.name for p in (install / "logs").glob("*.pid")) == [
        f"server-{p}.pid" for p in sorted((a, b))
    ]
    again = run(a, "start")
    assert again.returncode == 0 and f"already running on port {a}" in again.stdout
    assert run(a, "status").returncode == 0 and run(b, "status").returncode == 0
    assert run(a, "stop").returncode == 0
    assert not answers(a) and answers(b)
    assert run(a, "status").returncode == 1 and run(b, "status").returncode == 0
    assert run(b, "stop").returncode == 0 and not answers(b)


def test_stop_refuses_a_pid_that_is_not_its_ports_server(target) -> None:
    run, install = target
    a, b, c = free_port(), free_port(), free_port()
    assert run(a, "start").returncode == 0 and run(b, "start").returncode == 0
    logs = install / "logs"
    recorded_b = (logs / f"server-{b}.pid").read_text()
    # port c's file names a's server (nothing listens on c); port b's names a's server
    # while b's own server holds b: neither stop may touch a's server
    (logs / f"server-{c}.pid").write_text((logs / f"server-{a}.pid").read_text())
    refused = run(c, "stop")
    assert refused.returncode == 1 and "not stopping it" in refused.stderr
    (logs / f"server-{b}.pid").write_text((logs / f"server-{a}.pid").read_text())
    refused = run(b, "stop")
    assert refused.returncode == 1 and "listening there:" in refused.stderr
    assert answers(a) and answers(b)
    (logs / f"server-{b}.pid").write_text(recorded_b)
    (logs / f"server-{c}.pid").unlink()


def test_status_of_a_server_this_script_did_not_start_says_so(target) -> None:
    run, _ = target
    port = free_port()
    other = subprocess.Popen(["python3", "-c", SERVER, "--port", str(port)])
    try:
        for _ in range(50):
            if answers(port):
                break
            subprocess.run(["sleep", "0.1"], check=True)
        status = run(port, "status")
        assert status.returncode == 0 and "not started by this script" in status.stdout
        refused = run(port, "start")
        assert refused.returncode == 1 and f"port {port} is taken" in refused.stderr
        assert run(port, "stop").returncode == 0 and answers(port)  # nothing recorded: untouched
    finally:
        other.terminate()
        other.wait(10)
