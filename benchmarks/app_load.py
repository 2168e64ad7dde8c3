"""Load on the web app: 20 simulated annotators submit 5,000 ratings over HTTP in bursts.

A sample project (`blindspots.app.services.make_sample_project`: procedural scenes, untrained zoo models, the real
loop run until it waits for ratings, 250 candidates mined with the "random" strategy) is
served by `blindspots serve` (uvicorn, one process) on loopback. Each of 20 annotators rates
every candidate with a bearer token; 5 % of the answers are sent twice (a double click / a
retried request), and each annotator's ratings go out in a shuffled order. The answers go out
in `--bursts` bursts `--idle` seconds apart: in a burst every annotator sends its share back to
back on a fresh keep-alive connection (after the idle gap the server has closed the old one and
retired its idle worker threads, so the first requests of a burst meet a cold server, as after
a coffee break). The first burst starts right after the server answers its first request.

Printed, for each of `--repeat` runs (a fresh copy of the project and a fresh server each) and
their median:

1. throughput (ratings acknowledged per second of burst time), p50 / p99 / max latency of all
   requests, the same of the first request of each annotator in each burst ("first"), and the
   server process's CPU time per request (from /proc: the figure that moves least with load);
2. lost (an acknowledged answer missing or with another score in the store) and duplicated
   (more than one row for an annotator and image) counts — both must be 0;
3. the peer, measured in the same run: the same 5,000 answers written straight into a copy of
   the store by `Project.add_rating` from 20 threads queued on one lock as the app's writers
   are (no HTTP, no auth, no validation); the ratio app / direct shows what the web layer
   costs. The peer commits each answer in its own durable transaction (WAL,
   synchronous=FULL); the app group-commits answers that arrive together
   (`blindspots.app.batching`), each acknowledged only after its transaction committed.

Clients: "raw" (default) is one asyncio loop writing prepared HTTP/1.1 requests on sockets, so
the time measured is the server's and not the client's; "httpx" is 20 `httpx.Client` threads in
one process (how this benchmark measured before; on a 2-core machine their own GIL contention
adds to every latency).

Durability (``--kills K``): instead of the load figures, K trials of `kill -9` mid-burst. Each
takes a fresh copy of the project and a fresh server; every annotator sends all its answers in
one burst (raw client), and the server process gets SIGKILL once a share of the answers has
been acknowledged (shares spread evenly from 5 % to 95 % over the trials), with the other
annotators' requests in flight. Then the store is checked: acknowledged answers lost (missing)
or changed (another score), `PRAGMA integrity_check`; and the server is started again on the
same store and the seconds to its first answer printed. Lost and changed must be 0, the
integrity check "ok". `tests/test_app_durability.py` runs one such trial, small.

Run: ``.venv/bin/python benchmarks/app_load.py [--annotators 20] [--ratings 5000] [--bursts 4]
[--idle 11] [--repeat 3] [--client raw|httpx] [--workdir DIR] [--kills 8]``. Prints; asserts
nothing about time. The 1-minute load average is printed beside every figure: on a machine shared with other
jobs, times are noisy; compare the ratio, which is measured side by side.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan(ids: list[str], names: list[str], per: int, seed: int) -> dict[str, list[tuple[str, int]]]:
    """Each annotator's answers (image id, score 1..5) in a shuffled order."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in names:
        order = rng.permutation(len(ids))[:per]
        out[n] = [(ids[i], int(rng.integers(1, 6))) for i in order]
    return out


def with_repeats(items: list[tuple[str, int]], dup_share: float, rng: np.random.Generator) -> list[tuple[str, int]]:
    """The requests of one annotator: each answer, a `dup_share` of them twice in a row."""
    return [x for x in items for _ in range(2 if rng.random() < dup_share else 1)]


@dataclass
class Burst:
    """Latencies (seconds) of one burst: per annotator, in sending order."""

    lat: list[list[float]]
    failures: int
    seconds: float


@dataclass
class Run:
    bursts: list[Burst] = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    load: float = 0.0
    server_cpu_s: float = float("nan")  # CPU seconds of the server process during the bursts

    @property
    def all_ms(self) -> np.ndarray:
        return np.asarray([x for b in self.bursts for xs in b.lat for x in xs]) * 1000

    @property
    def first_ms(self) -> np.ndarray:
        return np.asarray([xs[0] for b in self.bursts for xs in b.lat if xs]) * 1000

    @property
    def failures(self) -> int:
        return sum(b.failures for b in self.bursts)

    @property
    def seconds(self) -> float:
        return sum(b.seconds for b in self.bursts)

    @property
    def cpu_ms_per_request(self) -> float:
        return self.server_cpu_s * 1000 / max(1, len(self.all_ms))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; NaN elsewhere). Unlike latency, this
    hardly depends on what else the machine runs."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


# ---- clients ---------------------------------------------------------------------------------

async def _raw_annotator(port: int, token: str, requests: list[tuple[str, int]], round_: int,
                         start: asyncio.Event, out: list[float],
                         on_reply: Callable[[str, int, int], None] | None = None) -> int:
    """One annotator on its own connection (opened when the burst starts: counted in the first
    request's time, as a browser reconnecting after a pause pays it). Returns the non-200 count.
    on_reply(image_id, score, status): called on each answer as it arrives."""
    head = (f"POST /api/ratings HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json\r\n").encode()
    bodies = [json.dumps({"round": round_, "image_id": i, "score": s}).encode() for i, s in requests]
    await start.wait()
    failures = 0
    t = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for (image_id, score), body in zip(requests, bodies):
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            status_headers = await reader.readuntil(b"\r\n\r\n")
            lines = status_headers.split(b"\r\n")
            status = int(lines[0].split()[1])
            size = next(int(ln.split(b":", 1)[1]) for ln in lines if ln.lower().startswith(b"content-length:"))
            await reader.readexactly(size)
            now = time.perf_counter()
            out.append(now - t)
            t = now
            failures += status != 200
            if on_reply is not None:
                on_reply(image_id, score, status)
    finally:
        writer.close()
    return failures


def burst_raw(url: str, tokens: dict[str, str], requests: dict[str, list], round_: int) -> Burst:
    port = int(url.rsplit(":", 1)[1])

    async def go() -> Burst:
        start = asyncio.Event()
        lat: list[list[float]] = [[] for _ in tokens]
        tasks = [asyncio.create_task(_raw_annotator(port, tokens[n], requests[n], round_, start, lat[k]))
                 for k, n in enumerate(tokens)]
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        start.set()
        failures = sum(await asyncio.gather(*tasks))
        return Burst(lat, failures, time.perf_counter() - t0)

    return asyncio.run(go())


def burst_httpx(url: str, tokens: dict[str, str], requests: dict[str, list], round_: int) -> Burst:
    import httpx

    lat: list[list[float]] = [[] for _ in tokens]
    failures = [0]
    lock = threading.Lock()
    start = threading.Barrier(len(tokens) + 1)

    def worker(k: int, name: str) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=60) as c:
            start.wait()
            for image_id, score in requests[name]:
                t = time.perf_counter()
                r = c.post("/api/ratings", json={"round": round_, "image_id": image_id, "score": score})
                lat[k].append(time.perf_counter() - t)
                if r.status_code != 200:
                    with lock:
                        failures[0] += 1

    secs = run_together([threading.Thread(target=worker, args=(k, n)) for k, n in enumerate(tokens)], start)
    return Burst(lat, failures[0], secs)


CLIENTS = {"raw": burst_raw, "httpx": burst_httpx}


def run_together(threads: list[threading.Thread], start: threading.Barrier) -> float:
    """Start the workers, release them together at `start`, and return the seconds until all are done."""
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def run_http(url: str, tokens: dict[str, str], answers: dict, round_: int, *, dup_share: float, seed: int,
             bursts: int, idle: float, client: str) -> list[Burst]:
    """Every annotator's answers in `bursts` bursts, `idle` seconds apart."""
    out = []
    for b in range(bursts):
        if b:
            time.sleep(idle)
        part = {n: with_repeats(xs[b::bursts], dup_share, np.random.default_rng([seed, k, b]))
                for k, (n, xs) in enumerate(answers.items())}
        out.append(CLIENTS[client](url, tokens, part, round_))
    return out


def run_direct(project_path: Path, answers: dict, round_: int) -> float:
    from blindspots.loop.project import Project

    p = Project.open(project_path)
    start = threading.Barrier(len(answers) + 1)
    lock = threading.Lock()  # writers queue in-process, as in the app (AppStore.write_lock)

    def worker(name: str) -> None:
        start.wait()
        for image_id, score in answers[name]:
            with lock:
                p.answers.add_rating(round_, image_id, name, score)

    return run_together([threading.Thread(target=worker, args=(n,)) for n in answers], start)


def check(project_path: Path, answers: dict, round_: int) -> tuple[int, int]:
    """(lost, duplicated) against what every annotator was acknowledged for."""
    from blindspots.loop.project import Project

    p = Project.open(project_path)
    rows = p.store.db.execute("SELECT annotator, image_id, score, COUNT(*) OVER (PARTITION BY annotator, image_id) "
                        "FROM ratings WHERE round=?", (round_,)).fetchall()
    stored = {(a, i): s for a, i, s, _ in rows}
    duplicated = sum(1 for *_, n in rows if n > 1)
    lost = sum(1 for n, xs in answers.items() for i, s in xs if stored.get((n, i)) != s)
    return lost, duplicated


def start_server(project: Path, port: int, log: Path | None = None) -> subprocess.Popen:
    """`blindspots serve PROJECT` on 127.0.0.1:port (one uvicorn process), returned once it answers."""
    import httpx

    cmd = [sys.executable, "-m", "blindspots", "serve", str(project), "--port", str(port)]
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it
    server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    for _ in range(1200):
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode} before answering")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/signin", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("the server did not start")


def serve_and_measure(project: Path, tokens: dict[str, str], answers: dict, a: argparse.Namespace) -> Run:
    """A fresh `blindspots serve` on `project`; the bursts against it; the store checked after."""
    port = free_port()
    server = start_server(project, port)
    try:
        cpu0 = cpu_seconds(server.pid)
        run = Run(run_http(f"http://127.0.0.1:{port}", tokens, answers, 0, dup_share=a.dup_share, seed=a.seed,
                           bursts=a.bursts, idle=a.idle, client=a.client), load=os.getloadavg()[0])
        run.server_cpu_s = cpu_seconds(server.pid) - cpu0
    finally:
        server.terminate()
        server.wait(timeout=30)
    run.lost, run.duplicated = check(project, answers, 0)
    return run


# ---- durability: kill -9 mid-burst -------------------------------------------------------------

@dataclass
class Kill:
    """One kill trial: what was acknowledged before the SIGKILL, and when it came."""

    acked: dict[tuple[str, str], int]  # (annotator, image id) -> acknowledged score
    sent: int  # answers the burst would have sent
    killed_after_s: float | None  # seconds into the burst (None: the burst ended first)


def kill_mid_burst(server: subprocess.Popen, port: int, tokens: dict[str, str], requests: dict[str, list],
                   round_: int, kill_after: int) -> Kill:
    """Every annotator's `requests` in one burst (raw client); SIGKILL to `server` as soon as
    `kill_after` answers are acknowledged (200), the other requests still in flight."""
    acked: dict[tuple[str, str], int] = {}
    t0 = [0.0]
    killed: list[float | None] = [None]

    def reply(name: str) -> Callable[[str, int, int], None]:
        def on(image_id: str, score: int, status: int) -> None:
            if status == 200:
                acked[(name, image_id)] = score
            if len(acked) >= kill_after and killed[0] is None:
                os.kill(server.pid, signal.SIGKILL)
                killed[0] = time.perf_counter() - t0[0]
        return on

    async def go() -> None:
        start = asyncio.Event()
        lat: list[list[float]] = [[] for _ in tokens]
        tasks = [asyncio.create_task(_raw_annotator(port, tokens[n], requests[n], round_, start, lat[k], reply(n)))
                 for k, n in enumerate(tokens)]
        await asyncio.sleep(0)
        t0[0] = time.perf_counter()
        start.set()
        await asyncio.gather(*tasks, return_exceptions=True)  # the killed server's connections break

    asyncio.run(go())
    if killed[0] is None:  # the burst ended first: kill it now (nothing was in flight)
        os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=30)
    return Kill(acked, sum(len(x) for x in requests.values()), killed[0])


def check_acked(project_path: Path, acked: dict[tuple[str, str], int], round_: int) -> tuple[int, int]:
    """(lost, changed): acknowledged answers missing from the store, or stored with another score.
    Read with plain sqlite3 (as after a crash, before anything of the app opens the store)."""
    with sqlite3.connect(project_path / "store.sqlite") as db:
        stored = {(a, i): s for a, i, s in db.execute("SELECT annotator, image_id, score FROM ratings WHERE round=?",
                                                       (round_,))}
    lost = sum(1 for k in acked if k not in stored)
    changed = sum(1 for k, s in acked.items() if k in stored and stored[k] != s)
    return lost, changed


def integrity(project_path: Path) -> str:
    """SQLite's `PRAGMA integrity_check` of the project's store ("ok" when sound)."""
    with sqlite3.connect(project_path / "store.sqlite") as db:
        return "; ".join(r[0] for r in db.execute("PRAGMA integrity_check"))


def kill_trials(sample: Path, work: Path, tokens: dict[str, str], answers: dict, a: argparse.Namespace) -> None:
    """`--kills` trials (module docstring); prints one line each and a summary."""
    n = sum(len(x) for x in answers.values())
    shares = np.linspace(0.05, 0.95, a.kills) if a.kills > 1 else np.array([0.5])
    totals = {"lost": 0, "changed": 0, "bad": 0}
    for k, share in enumerate(shares):
        dst = work / f"project-kill{k}"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(sample / "project", dst)
        add_annotators(dst, tokens)
        port = free_port()
        server = start_server(dst, port)
        kill = kill_mid_burst(server, port, tokens, answers, 0, max(1, int(share * n)))
        lost, changed = check_acked(dst, kill.acked, 0)
        ok = integrity(dst)
        t = time.perf_counter()
        again = start_server(dst, port)
        restart = time.perf_counter() - t
        again.terminate()
        again.wait(timeout=30)
        totals["lost"] += lost
        totals["changed"] += changed
        totals["bad"] += ok != "ok"
        when = "after the end of" if kill.killed_after_s is None else f"{kill.killed_after_s:.2f} s into"
        print(f"  kill {k + 1}: SIGKILL {when} a burst of {kill.sent} answers, after "
              f"{len(kill.acked)} acknowledged; lost {lost}, changed {changed}; integrity_check {ok}; restart "
              f"{restart:.1f} s (to the first answer); exit status {server.returncode}; load {os.getloadavg()[0]:.1f}")
    print(f"  kills: {len(shares)}; acknowledged answers lost {totals['lost']}, changed {totals['changed']}; "
          f"integrity_check failures {totals['bad']}")


def add_annotators(project_path: Path, tokens: dict[str, str]) -> None:
    from blindspots.loop.project import Project

    p = Project.open(project_path)
    for name, tok in tokens.items():
        p.answers.add_annotator(name, tok)
    p.close()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs"


def stats(ms: np.ndarray) -> str:
    return f"p50 {np.percentile(ms, 50):6.1f}  p99 {np.percentile(ms, 99):6.1f}  max {ms.max():6.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--annotators", type=int, default=20)
    ap.add_argument("--ratings", type=int, default=5000, help="Total ratings (spread evenly over annotators).")
    ap.add_argument("--dup-share", type=float, default=0.05, help="Share of answers sent twice.")
    ap.add_argument("--bursts", type=int, default=4, help="Bursts each annotator's answers are split into.")
    ap.add_argument("--idle", type=float, default=11.0, help="Seconds between bursts (the server retires idle "
                    "worker threads after 10 s and idle keep-alive connections after 5 s).")
    ap.add_argument("--repeat", type=int, default=1, help="Runs (fresh project copy and server each).")
    ap.add_argument("--client", choices=sorted(CLIENTS), default="raw")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kills", type=int, default=0, help="Instead of the load figures: this many kill -9 "
                    "trials mid-burst (module docstring).")
    a = ap.parse_args()
    if a.bursts < 1 or a.repeat < 1:
        raise SystemExit("--bursts and --repeat: expected >= 1")
    import torch

    torch.set_num_threads(1)
    from blindspots.app.services import make_sample_project

    per = a.ratings // a.annotators
    work = a.workdir or Path(tempfile.mkdtemp(prefix="app_load_"))
    sample = work / "sample"
    if not (sample / "project" / "store.sqlite").exists():
        shutil.rmtree(sample, ignore_errors=True)
        t = time.perf_counter()
        make_sample_project(sample, n_pool=per + 10, size=32, n_candidates=per, vote_set=False, review_set=False,
                            seed=a.seed)
        print(f"sample project with {per} candidates built in {time.perf_counter() - t:.1f} s")
    from blindspots.loop.project import Project

    base = Project.open(sample / "project")
    ids = list(base.answers.candidates(0, "M")["id"])
    assert len(ids) >= per, f"only {len(ids)} candidates"
    names = [f"rater{k:02d}" for k in range(a.annotators)]
    answers = plan(ids, names, per, a.seed)
    tokens = {n: f"token-{n}-{a.seed:06d}" for n in names}
    n = sum(len(x) for x in answers.values())
    if a.kills:
        print(f"app_load --kills {a.kills}: {a.annotators} annotators, {n} answers in one burst per trial, 1 uvicorn "
              f"process on loopback, raw client; CPU {cpu_model()}; load average at start {os.getloadavg()[0]:.1f}")
        kill_trials(sample, work, tokens, answers, a)
        return
    print(f"app_load: {a.annotators} annotators, {n} ratings (+{a.dup_share:.0%} sent twice) in {a.bursts} "
          f"bursts {a.idle:g} s apart, 1 uvicorn process on loopback, {a.client} client; CPU {cpu_model()}; "
          f"load average at start {os.getloadavg()[0]:.1f}")
    runs = []
    for r in range(a.repeat):
        dst = work / f"project-app{r}"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(sample / "project", dst)
        add_annotators(dst, tokens)
        run = serve_and_measure(dst, tokens, answers, a)
        runs.append(run)
        print(f"  run {r + 1}: {n / run.seconds:6.1f} ratings/s; all {len(run.all_ms)} requests {stats(run.all_ms)}; "
              f"first of each burst ({len(run.first_ms)}) {stats(run.first_ms)}; server CPU "
              f"{run.cpu_ms_per_request:.2f} ms/request; non-200: {run.failures}; lost {run.lost}, "
              f"duplicated {run.duplicated}; load {run.load:.1f}")
    med = {k: float(np.median([f(r) for r in runs])) for k, f in {
        "rps": lambda r: n / r.seconds, "p50": lambda r: np.percentile(r.all_ms, 50),
        "p99": lambda r: np.percentile(r.all_ms, 99), "f50": lambda r: np.percentile(r.first_ms, 50),
        "f99": lambda r: np.percentile(r.first_ms, 99), "cpu": lambda r: r.cpu_ms_per_request,
        "load": lambda r: r.load}.items()}
    print(f"  app (median of {len(runs)}): {med['rps']:8.1f} ratings/s   latency p50 {med['p50']:.1f} ms, "
          f"p99 {med['p99']:.1f} ms; first of each burst p50 {med['f50']:.1f} ms, p99 {med['f99']:.1f} ms; "
          f"server CPU {med['cpu']:.2f} ms/request; load {med['load']:.1f}")
    dst = work / "project-direct"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(sample / "project", dst)
    direct_secs = run_direct(dst, answers, 0)
    d_lost, d_dup = check(dst, answers, 0)
    print(f"  direct: {n / direct_secs:8.1f} ratings/s  ({direct_secs:.2f} s)  Project.add_rating from "
          f"{a.annotators} threads (peer); load {os.getloadavg()[0]:.1f}")
    print(f"  ratio app / direct throughput: {med['rps'] / (n / direct_secs):.2f}")
    print(f"  lost: {sum(r.lost for r in runs)}  duplicated: {sum(r.duplicated for r in runs)}  "
          f"non-200: {sum(r.failures for r in runs)}   (direct peer: lost {d_lost}, duplicated {d_dup})")


if __name__ == "__main__":
    main()
