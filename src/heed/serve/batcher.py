"""Dynamic batching: sentences of concurrent requests decoded together, on one worker thread.

A request becomes a Job: its sentences, what each costs, a key (the model and every decoding
option: only jobs with the same key can share a search) and a future. The worker takes the oldest
job, then gathers later jobs with the same key for up to `max_wait` seconds after the oldest
arrived, or until `max_sentences` are gathered, runs them as one call, and splits the results back,
job by job. The event loop only puts jobs in the queue and awaits their futures, so it never blocks
on the model.

A call is a turn, and a job gets at most `slice_work` of work a turn (its next sentences, at least
one; costs are the app's, in decoder rows x steps). A costlier job is decoded a slice at a time: after
each slice its remainder goes to the back of the queue, behind the requests that arrived meanwhile,
so one client's large request delays the others by a slice, not by the whole request.

With `enabled=False` each job runs alone, in arrival order (still a slice at a time), on the worker
thread: the baseline the load bench compares against.

Batching changes no hypothesis, only which sentences share a matrix product: tokens are the same,
and scores agree to float rounding (BLAS picks its kernels by the number of rows, so a sentence's
last bits can differ between a batch of 1 and a batch of 50; tests/serve/test_serve_api.py checks it).
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
    """One request's work: `items` (one per sentence, opaque to the batcher) decoded under `key`.

    `items` and `costs` hold what is still to decode; `results` what the slices decoded so far."""

    key: Hashable
    items: list[Any]
    costs: list[int]
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    arrived: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # its request timed out: nobody waits for the result any more
    results: list[Any] = field(default_factory=list)


# run(key, items, abandoned) -> one result per item, in order; `abandoned()` turns true once every
# job of the call has been given up, so a long decoding can stop early (it may then raise).
# Raising fails every job of the batch; see _run.
RunBatch = Callable[[Hashable, list[Any], Callable[[], bool]], Sequence[Any]]

# A turn's share of one job: the job and the items it decodes in this call.
Slice = tuple[Job, list[Any]]


class Batcher:
    """A queue of Jobs and the one worker thread that decodes them (see the module doc)."""

    def __init__(self, run: RunBatch, *, max_wait: float = 0.005, max_sentences: int = 64,
                 max_queue: int = 1024, slice_work: int | None = None, enabled: bool = True) -> None:
        if max_wait < 0 or max_sentences < 1 or max_queue < 1 or (slice_work is not None and slice_work < 1):
            raise ValueError("max_wait >= 0, max_sentences >= 1, max_queue >= 1 and slice_work >= 1")
        self._run_batch = run
        self.max_wait, self.max_sentences, self.max_queue, self.enabled = max_wait, max_sentences, max_queue, enabled
        self.slice_work = slice_work  # None: a job is never cut below max_sentences
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

    def submit(self, key: Hashable, items: list[Any], costs: Sequence[int] | None = None) -> Job:
        """Queue a job (`costs`: one per item, default 1 each); QueueFull if its sentences would
        pass `max_queue`."""
        items = list(items)
        costs = [1] * len(items) if costs is None else [int(c) for c in costs]
        if len(costs) != len(items):
            raise ValueError(f"{len(items)} items but {len(costs)} costs")
        job = Job(key, items, costs)
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

    async def run(self, key: Hashable, items: list[Any], *, costs: Sequence[int] | None = None,
                  timeout: float) -> list[Any]:
        """Submit and await the results; asyncio.TimeoutError after `timeout` seconds (what is left
        of the job is then dropped, and a running slice is told to stop)."""
        job = self.submit(key, items, costs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job.future), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            job.abandoned = True  # a running slice stops at its next check (see RunBatch)
            self._discard(job)
            raise

    def _discard(self, job: Job) -> None:
        """Drop an abandoned job that is waiting for a turn, freeing its place in the queue at once."""
        with self._cond:
            job.future.cancel()  # only a job that never ran can be cancelled
            if job in self._jobs:
                self._jobs.remove(job)
                self._queued -= len(job.items)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the batch being decoded, fail the queued jobs, and end the worker."""
        with self._cond:
            self._stopping = True
            while self._jobs:
                self._fail(self._jobs.popleft(), RuntimeError("the server is stopping"))
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

    def _next_group(self) -> list[Slice] | None:
        """Block for the oldest job, then gather same-key jobs (see the module doc), each giving a
        slice. Jobs given up while queued are dropped on the way."""
        with self._cond:
            while True:
                while self._jobs and self._gone(self._jobs[0]):
                    self._queued -= len(self._jobs.popleft().items)
                if self._stopping:
                    return None
                if not self._jobs:
                    self._cond.wait()
                    continue
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
                # `first` may have been given up (_discard) while the batch gathered: start over, or the
                # worker would pop an empty queue (and die) or another job (whose request would never end)
                if self._jobs and self._jobs[0] is first:
                    break
            self._jobs.popleft()
            self._queued -= len(first.items)  # out of the queue; a remainder comes back in _done
            group = [self._slice(first, self.max_sentences)]
            size, rest = len(group[0][1]), deque[Job]()
            while self._jobs and self.enabled and size < self.max_sentences:
                job = self._jobs.popleft()
                if self._gone(job):
                    self._queued -= len(job.items)
                elif job.key == first.key:
                    self._queued -= len(job.items)
                    group.append(self._slice(job, self.max_sentences - size))
                    size += len(group[-1][1])
                else:
                    rest.append(job)
            rest.extend(self._jobs)
            self._jobs = rest
            return group

    @staticmethod
    def _gone(job: Job) -> bool:
        return job.abandoned or job.future.cancelled()

    def _slice(self, job: Job, room: int) -> Slice:
        """Take the job's next items for this turn: at most `room`, and within `slice_work` (at
        least one item, however costly)."""
        n, spent = 0, 0
        for cost in job.costs[:room]:
            if n and self.slice_work is not None and spent + cost > self.slice_work:
                break
            n, spent = n + 1, spent + cost
        taken = job.items[:n]
        del job.items[:n], job.costs[:n]
        return job, taken

    def _gathered(self, key: Hashable) -> int:
        return sum(len(j.items) for j in self._jobs if j.key == key)

    def _run(self, group: list[Slice]) -> None:
        """Decode a group as one call and hand each job its part; if the call fails, each job's
        slice is run alone, so one job's problem fails that job only."""
        live = [(job, taken) for job, taken in group if self._start(job)]
        if not live:
            return
        started = time.monotonic()
        items = [item for _, taken in live for item in taken]
        try:
            results = list(self._run_batch(live[0][0].key, items, lambda: all(job.abandoned for job, _ in live)))
        except Exception as error:  # noqa: BLE001  # handed to the jobs: each request answers with its own error
            if len(live) == 1:
                self._fail(live[0][0], error)
                return
            for job, taken in live:
                try:
                    self._done(job, list(self._run_batch(job.key, taken, lambda job=job: job.abandoned)))  # type: ignore[misc]  # a lambda's default
                except Exception as alone:  # noqa: BLE001  # this job's own failure, answered to its request
                    self._fail(job, alone)
            return
        per_sentence = (time.monotonic() - started) / max(1, len(items))
        self._seconds_per_sentence = 0.8 * self._seconds_per_sentence + 0.2 * per_sentence
        start = 0
        for job, taken in live:
            self._done(job, results[start:start + len(taken)])
            start += len(taken)

    @staticmethod
    def _start(job: Job) -> bool:
        """Whether the job's slice should run: its first slice marks its future running."""
        if job.future.running():  # a later slice
            return not job.abandoned
        return job.future.set_running_or_notify_cancel()

    def _done(self, job: Job, results: list[Any]) -> None:
        """A slice decoded: the job's result once nothing is left, else its remainder to the back of the queue."""
        job.results.extend(results)
        if not job.items:
            job.future.set_result(job.results)
            return
        with self._cond:
            if self._stopping:
                self._fail(job, RuntimeError("the server is stopping"))
            elif not job.abandoned:
                self._jobs.append(job)
                self._queued += len(job.items)
                self._cond.notify()

    @staticmethod
    def _fail(job: Job, error: BaseException) -> None:
        if not job.future.cancel() and not job.future.done():
            job.future.set_exception(error)
