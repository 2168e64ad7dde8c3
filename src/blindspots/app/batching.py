"""Group commit for ratings: answers that arrive together share one durable transaction.

Each rating is acknowledged only after the transaction holding it has committed
(`synchronous=FULL`), exactly as with one transaction per answer; but while one commit is
being flushed to disk the next answers queue up and go out together, so 20 raters pressing
keys at once cost a few fsyncs instead of twenty. A batch that fails (it should not: rows are
validated before they are queued) is retried row by row so each request gets its own error.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any, Sequence

from blindspots.loop.project import Project

log = logging.getLogger(__name__)


class GroupWriter:
    """One writer thread per app: `submit(row)` blocks until `row` is committed (or raises).

    row: (round, image_id, annotator, score) as for `Project.add_ratings`. max_batch: most
    rows in one transaction. lock: held around each transaction (the app's write lock, so
    other writers of the same process queue instead of sleeping in SQLite's busy handler).
    """

    def __init__(self, project: Project, lock: threading.Lock, *, max_batch: int = 256) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch: expected an int >= 1, got {max_batch!r}")
        self.project, self.lock, self.max_batch = project, lock, max_batch
        self._q: queue.Queue[tuple[tuple, Future] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.batches = 0  # transactions committed (for benchmarks)

    def start(self) -> None:
        """Start the writer thread now (else the first answer does); it opens its connection at once."""
        self._ensure_started()

    def enqueue(self, row: tuple[int, str, str, Any]) -> Future:
        """Queue `row`; the future completes (None, or the row's error) once it is committed."""
        self._ensure_started()
        fut: Future = Future()
        self._q.put((row, fut))
        return fut

    def submit(self, row: tuple[int, str, str, Any], timeout: float = 60.0) -> None:
        """Queue `row` and block until it is committed (raises the row's error)."""
        self.enqueue(row).result(timeout=timeout)

    async def commit(self, row: tuple[int, str, str, Any], timeout: float = 60.0) -> None:
        """`submit` for async routes: awaits the commit without holding a worker thread. A request
        cancelled while its row is still queued withdraws the row; once the row is being written,
        it is committed whatever happens to the request."""
        await asyncio.wait_for(asyncio.wrap_future(self.enqueue(row)), timeout)

    def close(self) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="blindspots-group-writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        try:
            self.project.store.db  # this thread's connection, opened before the first answer waits on it
        except Exception:  # noqa: BLE001 - the first write reports the error to its request
            log.warning("group writer could not open the store yet", exc_info=True)
        while True:
            first = self._q.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)
                    break
                batch.append(nxt)
            # A future cancelled while queued (its request went away before the commit) is not
            # written: nobody will be told it was. The others become RUNNING, so they can no
            # longer be cancelled and always receive their answer.
            batch = [(row, fut) for row, fut in batch if fut.set_running_or_notify_cancel()]
            if batch:
                self._write(batch)

    def _write(self, batch: Sequence[tuple[tuple, Future]]) -> None:
        try:
            with self.lock:
                self.project.answers.add_ratings([row for row, _ in batch])
            self.batches += 1
        except Exception:  # noqa: BLE001 - isolate the failing row, answer each request on its own
            log.warning("group commit of %d ratings failed; writing them one by one", len(batch), exc_info=True)
            for row, fut in batch:
                try:
                    with self.lock:
                        self.project.answers.add_ratings([row])
                except Exception as e:  # noqa: BLE001
                    fut.set_exception(e)
                else:
                    fut.set_result(None)
            return
        for _, fut in batch:
            fut.set_result(None)
