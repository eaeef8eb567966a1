"""Dynamic batching: sentences of concurrent requests decoded together, on one worker thread.

A request becomes a Job: its sentences, a key (the model and every decoding option: only jobs with
the same key can share a search) and a future. The worker takes the oldest job, then gathers later
jobs with the same key for up to `max_wait` seconds after the oldest arrived, or until
`max_sentences` are gathered, runs them as one call, and splits the results back, job by job.
The event loop only puts jobs in the queue and awaits their futures, so it never blocks on the model.

With `enabled=False` each job runs alone, in arrival order, still on the worker thread: the
baseline the load bench compares against.

Batching changes no hypothesis, only which sentences share a matrix product: tokens are the same,
and scores agree to float rounding (BLAS picks its kernels by the number of rows, so a sentence's
last bits can differ between a batch of 1 and a batch of 50; tests/test_serve_api.py checks it).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any


class QueueFull(Exception):
    """The queue holds `max_queue` sentences already; `retry_after` is a hint in seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the server is busy: retry in {retry_after} s")
        self.retry_after = retry_after


@dataclass(eq=False)
class Job:
    """One request's work: `items` (one per sentence, opaque to the batcher) decoded under `key`."""

    key: Hashable
    items: list[Any]
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    arrived: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # its request timed out: nobody waits for the result any more


# run(key, items, abandoned) -> one result per item, in order; `abandoned()` turns true once every
# job of the call has been given up, so a long decoding can stop early (it may then raise).
# Raising fails every job of the batch; see _run.
RunBatch = Callable[[Hashable, list[Any], Callable[[], bool]], Sequence[Any]]


class Batcher:
    """A queue of Jobs and the one worker thread that decodes them (see the module doc)."""

    def __init__(self, run: RunBatch, *, max_wait: float = 0.005, max_sentences: int = 64,
                 max_queue: int = 1024, enabled: bool = True) -> None:
        if max_wait < 0 or max_sentences < 1 or max_queue < 1:
            raise ValueError("max_wait >= 0, max_sentences >= 1 and max_queue >= 1")
        self._run_batch = run
        self.max_wait, self.max_sentences, self.max_queue, self.enabled = max_wait, max_sentences, max_queue, enabled
        self._jobs: deque[Job] = deque()
        self._queued = 0  # sentences in self._jobs
        self._cond = threading.Condition()
        self._stopping = False
        self._seconds_per_sentence = 0.01  # a running estimate, for Retry-After
        self._thread = threading.Thread(target=self._work, name="heed-batcher", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Sentences waiting (not counting the batch being decoded)."""
        return self._queued

    def submit(self, key: Hashable, items: list[Any]) -> Job:
        """Queue a job; QueueFull if its sentences would pass `max_queue`."""
        job = Job(key, list(items))
        with self._cond:
            if self._stopping:
                raise RuntimeError("the batcher is stopped")
            if self._queued + len(job.items) > self.max_queue:
                wait = (self._queued + len(job.items)) * self._seconds_per_sentence
                raise QueueFull(retry_after=max(1, int(wait + 0.999)))
            self._jobs.append(job)
            self._queued += len(job.items)
            self._cond.notify()
        return job

    async def run(self, key: Hashable, items: list[Any], *, timeout: float) -> list[Any]:
        """Submit and await the results; asyncio.TimeoutError after `timeout` seconds (the job is
        then dropped if it has not started)."""
        job = self.submit(key, items)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job.future), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            job.abandoned = True  # a running job stops at its next check (see RunBatch)
            self._discard(job)
            raise

    def _discard(self, job: Job) -> None:
        """Drop a job that is still queued, freeing its place in the queue at once."""
        with self._cond:
            if job.future.cancel() and job in self._jobs:
                self._jobs.remove(job)
                self._queued -= len(job.items)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the batch being decoded, fail the queued jobs, and end the worker."""
        with self._cond:
            self._stopping = True
            while self._jobs:
                job = self._jobs.popleft()
                job.future.cancel()
            self._queued = 0
            self._cond.notify_all()
        self._thread.join(timeout)

    # ----------------------------------------------------------------------------- the worker

    def _work(self) -> None:
        while True:
            group = self._next_group()
            if group is None:
                return
            self._run(group)

    def _next_group(self) -> list[Job] | None:
        """Block for the oldest job, then gather same-key jobs (see the module doc). Jobs that
        timed out while queued are dropped on the way."""
        with self._cond:
            while True:
                while self._jobs and self._jobs[0].future.cancelled():
                    self._queued -= len(self._jobs.popleft().items)
                if self._jobs or self._stopping:
                    break
                self._cond.wait()
            if self._stopping:
                return None
            first = self._jobs[0]
            if self.enabled:
                deadline = first.arrived + self.max_wait
                while not self._stopping and self._gathered(first.key) < self.max_sentences:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopping:
                    return None
            group, size, rest = [self._jobs.popleft()], len(first.items), deque()
            while self._jobs and self.enabled:
                job = self._jobs.popleft()
                if job.future.cancelled():
                    self._queued -= len(job.items)
                elif job.key == first.key and size + len(job.items) <= self.max_sentences:
                    group.append(job)
                    size += len(job.items)
                else:
                    rest.append(job)
            rest.extend(self._jobs)
            self._jobs = rest
            self._queued -= size
            return group

    def _gathered(self, key: Hashable) -> int:
        return sum(len(j.items) for j in self._jobs if j.key == key)

    def _run(self, group: list[Job]) -> None:
        """Decode a group as one call and hand each job its slice; if the call fails, each job
        is run alone, so one job's problem fails that job only."""
        live = [job for job in group if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        started = time.monotonic()
        items = [item for job in live for item in job.items]
        try:
            results = list(self._run_batch(live[0].key, items, lambda: all(job.abandoned for job in live)))
        except Exception as error:
            if len(live) == 1:
                live[0].future.set_exception(error)
                return
            for job in live:
                try:
                    job.future.set_result(list(self._run_batch(job.key, job.items, lambda job=job: job.abandoned)))
                except Exception as alone:
                    job.future.set_exception(alone)
            return
        per_sentence = (time.monotonic() - started) / max(1, len(items))
        self._seconds_per_sentence = 0.8 * self._seconds_per_sentence + 0.2 * per_sentence
        start = 0
        for job in live:
            job.future.set_result(results[start:start + len(job.items)])
            start += len(job.items)
