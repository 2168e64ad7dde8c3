"""Load on the web app: 20 simulated annotators submit 5,000 ratings over HTTP at once.

A sample project (`blindspots.app.sample`: procedural scenes, untrained zoo models, the real
loop run until it waits for ratings, 250 candidates mined with the "random" strategy) is
served by `blindspots serve` (uvicorn, one process) on loopback. Each of 20 annotators rates
every candidate with its own keep-alive HTTP client and a bearer token; 5 % of the answers are
sent twice (a double click / a retried request), and each annotator's ratings go out in a
shuffled order. Printed:

1. throughput (ratings acknowledged per second), p50 / p99 latency per request;
2. lost (an acknowledged answer missing or with another score in the store) and duplicated
   (more than one row for an annotator and image) counts — both must be 0;
3. the peer, measured in the same run: the same 5,000 answers written straight into a copy of
   the store by `Project.add_rating` from 20 threads queued on one lock as the app's writers
   are (no HTTP, no auth, no validation); the ratio app / direct shows what the web layer
   costs. The peer commits each answer in its own durable transaction (WAL,
   synchronous=FULL); the app group-commits answers that arrive together
   (`blindspots.app.batching`), each acknowledged only after its transaction committed.

Run: ``.venv/bin/python benchmarks/app_load.py [--annotators 20] [--ratings 5000] [--workdir DIR]``.
Prints; asserts nothing about time. On a machine shared with other jobs times are noisy;
compare the ratio, which is measured side by side.
"""
from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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


def run_http(url: str, tokens: dict[str, str], answers: dict, round_: int, dup_share: float,
             seed: int) -> tuple[list[float], int, float]:
    import httpx

    lat: list[list[float]] = [[] for _ in tokens]
    failures = [0]
    lock = threading.Lock()
    start = threading.Barrier(len(tokens) + 1)

    def worker(k: int, name: str) -> None:
        rng = np.random.default_rng([seed, k])
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=60) as c:
            start.wait()
            for image_id, score in answers[name]:
                for _ in range(2 if rng.random() < dup_share else 1):
                    t = time.perf_counter()
                    r = c.post("/api/ratings", json={"round": round_, "image_id": image_id, "score": score})
                    lat[k].append(time.perf_counter() - t)
                    if r.status_code != 200:
                        with lock:
                            failures[0] += 1

    elapsed = run_together([threading.Thread(target=worker, args=(k, n)) for k, n in enumerate(tokens)], start)
    return [x for xs in lat for x in xs], failures[0], elapsed


def run_together(threads: list[threading.Thread], start: threading.Barrier) -> float:
    """Start the workers, release them together at `start`, and return the seconds until all are done."""
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def run_direct(project_path: Path, answers: dict, round_: int) -> float:
    from blindspots.loop.project import Project

    p = Project.open(project_path)
    start = threading.Barrier(len(answers) + 1)
    lock = threading.Lock()  # writers queue in-process, as in the app (AppStore.write_lock)

    def worker(name: str) -> None:
        start.wait()
        for image_id, score in answers[name]:
            with lock:
                p.add_rating(round_, image_id, name, score)

    return run_together([threading.Thread(target=worker, args=(n,)) for n in answers], start)


def check(project_path: Path, answers: dict, round_: int) -> tuple[int, int]:
    """(lost, duplicated) against what every annotator was acknowledged for."""
    from blindspots.loop.project import Project

    p = Project.open(project_path)
    rows = p.db.execute("SELECT annotator, image_id, score, COUNT(*) OVER (PARTITION BY annotator, image_id) "
                        "FROM ratings WHERE round=?", (round_,)).fetchall()
    stored = {(a, i): s for a, i, s, _ in rows}
    duplicated = sum(1 for *_, n in rows if n > 1)
    lost = sum(1 for n, xs in answers.items() for i, s in xs if stored.get((n, i)) != s)
    return lost, duplicated


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--annotators", type=int, default=20)
    ap.add_argument("--ratings", type=int, default=5000, help="Total ratings (spread evenly over annotators).")
    ap.add_argument("--dup-share", type=float, default=0.05, help="Share of answers sent twice.")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from blindspots.app.sample import make_sample_project

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
    ids = list(base.candidates(0, "M")["id"])
    assert len(ids) >= per, f"only {len(ids)} candidates"
    names = [f"rater{k:02d}" for k in range(a.annotators)]
    answers = plan(ids, names, per, a.seed)
    runs = {}
    for label in ("app", "direct"):
        dst = work / f"project-{label}"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(sample / "project", dst)
        runs[label] = dst
    p = Project.open(runs["app"])
    tokens = {}
    for n in names:
        tokens[n] = f"token-{n}-{a.seed:06d}"
        p.add_annotator(n, tokens[n])
    p.close()

    port = free_port()
    exe = Path(sys.executable).with_name("blindspots")
    server = subprocess.Popen([str(exe), "serve", str(runs["app"]), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        import httpx

        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/signin", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise SystemExit("the server did not start")
        lat, failures, secs = run_http(f"http://127.0.0.1:{port}", tokens, answers, 0, a.dup_share, a.seed)
    finally:
        server.terminate()
        server.wait(timeout=30)
    lost, dup = check(runs["app"], answers, 0)
    direct_secs = run_direct(runs["direct"], answers, 0)
    d_lost, d_dup = check(runs["direct"], answers, 0)
    n = sum(len(x) for x in answers.values())
    lat_ms = np.asarray(lat) * 1000
    print(f"app_load: {a.annotators} annotators, {n} ratings ({len(lat)} requests incl. {len(lat) - n} repeats), "
          f"1 uvicorn process on loopback")
    print(f"  app:    {n / secs:8.1f} ratings/s  ({secs:.2f} s)   latency p50 {np.percentile(lat_ms, 50):.1f} ms, "
          f"p99 {np.percentile(lat_ms, 99):.1f} ms, max {lat_ms.max():.1f} ms; non-200 answers: {failures}")
    print(f"  direct: {n / direct_secs:8.1f} ratings/s  ({direct_secs:.2f} s)  Project.add_rating from "
          f"{a.annotators} threads (peer)")
    print(f"  ratio app / direct throughput: {direct_secs / secs:.2f}")
    print(f"  lost: {lost}  duplicated: {dup}   (direct peer: lost {d_lost}, duplicated {d_dup})")


if __name__ == "__main__":
    main()
