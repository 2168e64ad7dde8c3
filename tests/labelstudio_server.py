"""A real Label Studio server for tests: `.venv/labelstudio/` (made by scripts/test.sh; its pins clash with
ours), started on 127.0.0.1 with a random free port, a temporary data folder, a fixed admin and API token,
analytics, version checks and Sentry off, Local Files serving under a given document root; stopped after.

The first start of a fresh database runs every Django migration (minutes on 2 cores): scripts/test.sh
migrates one template database once (`.venv/labelstudio/template/`), copied into each server's folder.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv" / "labelstudio"
EXE = VENV / "bin" / "label-studio"
TEMPLATE = VENV / "template" / "label_studio.sqlite3"
USERNAME = "admin@blindspots.test"
PASSWORD = "blindspots-admin-pw"
TOKEN = "b1ind5p075" + "0123456789abcdef0123456789abcdef"


@dataclass
class Server:
    url: str
    token: str
    username: str
    password: str
    data_dir: Path
    document_root: Path
    process: subprocess.Popen

    def log_tail(self, n: int = 40) -> str:
        path = self.data_dir / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.is_file() else ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(data_dir: Path, document_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABEL_STUDIO_", "DJANGO_"))}
    env.update({
        "LABEL_STUDIO_USERNAME": USERNAME, "LABEL_STUDIO_PASSWORD": PASSWORD, "LABEL_STUDIO_USER_TOKEN": TOKEN,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",  # the fixed token above is a legacy token
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
        "COLLECT_ANALYTICS": "false", "LATEST_VERSION_CHECK": "false", "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": "",
        "FEATURE_FLAGS_OFFLINE": "true",
        "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true", "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(document_root),
        # the ML backend and the webhook receiver of the tests listen on 127.0.0.1 too
        "ML_BLOCK_LOCAL_IP": "false", "SSRF_PROTECTION_ENABLED": "false",
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir), "HOME": str(data_dir),
    })
    return env


def start(data_dir: Path, document_root: Path, *, timeout: float = 420.0) -> Server:
    """Start Label Studio; pytest.skip when it is not installed, a failure with its log when it does not come up."""
    if not EXE.is_file():
        pytest.skip(f"Label Studio is not installed in {VENV} (scripts/test.sh installs label-studio there; its "
                    "pins clash with the main environment)")
    data_dir.mkdir(parents=True, exist_ok=True)
    if TEMPLATE.is_file():
        shutil.copy(TEMPLATE, data_dir / TEMPLATE.name)
    port = free_port()
    log = open(data_dir / "server.log", "wb")
    proc = subprocess.Popen([str(EXE), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(data_dir), "--enable-legacy-api-token", "--log-level", "WARNING"],
                            env=server_env(data_dir, document_root), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=data_dir)
    server = Server(f"http://127.0.0.1:{port}", TOKEN, USERNAME, PASSWORD, data_dir, document_root, proc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Label Studio exited with code {proc.returncode}:\n{server.log_tail()}")
        try:
            if httpx.get(server.url + "/api/projects", headers={"Authorization": f"Token {TOKEN}"},
                         timeout=5).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    stop(server)
    raise RuntimeError(f"Label Studio did not answer within {timeout:.0f} s:\n{server.log_tail()}")


def stop(server: Server) -> None:
    """Stop the server's process group (it was started in its own session)."""
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)


def build_template(timeout: float = 900.0) -> Path:
    """Migrate a fresh database once (start a server, wait for it, stop it) into TEMPLATE."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ls-template-") as tmp:
        s = start(Path(tmp) / "data", Path(tmp), timeout=timeout)
        stop(s)
        TEMPLATE.parent.mkdir(parents=True, exist_ok=True)
        part = TEMPLATE.with_suffix(".part")
        shutil.copy(Path(tmp) / "data" / TEMPLATE.name, part)
        os.replace(part, TEMPLATE)
    return TEMPLATE


if __name__ == "__main__":  # scripts/test.sh: `python tests/labelstudio_server.py` once after installing
    print(f"Label Studio template database: {build_template()}")
