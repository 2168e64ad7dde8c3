"""`blindspots serve` binds its port before anything else: a busy port is one line `error: --port: ...` with
exit code 2 and a suggestion, and a free one serves the app on that very socket (127.0.0.1 only)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blindspots.app.port import bind_port
from blindspots.cli import app

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def busy_port():  # noqa: ANN201 - a port another socket listens on
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def test_bind_port_refuses_a_busy_port(busy_port: int) -> None:
    with pytest.raises(ValueError, match=rf"--port: expected a free TCP port on 127.0.0.1, got {busy_port}.*"
                                         rf"choose another with --port {busy_port + 1}"):
        bind_port("127.0.0.1", busy_port)
    with pytest.raises(ValueError, match="--port: expected a TCP port from 0 to 65535, got 70000"):
        bind_port("127.0.0.1", 70000)
    sock = bind_port("127.0.0.1", 0)
    assert sock.getsockname()[1] > 0
    sock.close()


def test_serve_on_a_busy_port_is_one_line_before_any_announcement(busy_port: int, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["serve", str(tmp_path), "--port", str(busy_port)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("error: --port: expected a free TCP port") and "serving" not in res.output


def test_serve_answers_on_the_bound_port(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    made = subprocess.run([sys.executable, "-m", "blindspots", "web", "sample", str(tmp_path / "s"),
                           "--pool-size", "6", "--candidates", "3", "--size", "32"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen([sys.executable, "-m", "blindspots", "serve", str(tmp_path / "s" / "project"),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        deadline, body = time.monotonic() + 240, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/signin", timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert body is not None, f"no answer on port {port}: {proc.poll()} {proc.stderr.read() if proc.poll() else ''}"
        assert "<html" in body.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
