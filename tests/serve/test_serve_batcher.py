"""The dynamic batcher on its own: which jobs share a call, budgets, the queue limit, timeouts, and
one failing job failing only itself. The decoder is a recording function, so every call is visible."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Hashable
from typing import Any

import pytest

from heed.serve.batcher import Batcher, QueueFull


class Recorder:
    """A decode function that records each call's (key, items) and returns item * 10; it blocks while
    `gate` is clear, and raises for an item named "bad"."""

    def __init__(self) -> None:
        self.calls: list[tuple[Hashable, list[Any]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, key: Hashable, items: list[Any], abandoned: Any = lambda: False) -> list[Any]:
        self.started.set()
        self.gate.wait(10)
        self.calls.append((key, list(items)))
        if "bad" in items:
            raise ValueError("bad item")
        return [item * 10 for item in items]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def _submit_all(batcher: Batcher, jobs: list[tuple[Hashable, list[Any]]]) -> list[Any]:
    submitted = [batcher.submit(key, items) for key, items in jobs]
    return [job.future.result(timeout=10) for job in submitted]


def _held(recorder: Recorder, batcher: Batcher) -> None:
    """Occupy the worker with a job on key "hold" until recorder.gate is set."""
    recorder.gate.clear()
    batcher.submit("hold", [0])
    assert recorder.started.wait(5)


def test_jobs_with_the_same_key_share_one_call_and_get_their_own_results(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.05, max_sentences=100)
    try:
        _held(recorder, batcher)
        jobs = [("a", [1, 2]), ("b", [3]), ("a", [4]), ("a", [5, 6, 7])]
        submitted = [batcher.submit(key, items) for key, items in jobs]
        recorder.gate.set()
        results = [job.future.result(timeout=10) for job in submitted]
    finally:
        batcher.stop()
    assert results == [[10, 20], [30], [40], [50, 60, 70]]
    assert recorder.calls[1:] == [("a", [1, 2, 4, 5, 6, 7]), ("b", [3])]


def test_a_batch_never_passes_the_sentence_budget(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.05, max_sentences=4)
    try:
        _held(recorder, batcher)
        submitted = [batcher.submit("k", [i, i]) for i in range(5)]
        recorder.gate.set()
        results = [job.future.result(timeout=10) for job in submitted]
    finally:
        batcher.stop()
    assert results == [[10 * i, 10 * i] for i in range(5)]
    assert [len(items) for _, items in recorder.calls[1:]] == [4, 4, 2]


def test_without_batching_each_job_runs_alone_in_arrival_order(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.05, max_sentences=100, enabled=False)
    try:
        _held(recorder, batcher)
        submitted = [batcher.submit("k", [i]) for i in range(1, 5)]
        recorder.gate.set()
        assert [job.future.result(timeout=10) for job in submitted] == [[10], [20], [30], [40]]
    finally:
        batcher.stop()
    assert recorder.calls[1:] == [("k", [1]), ("k", [2]), ("k", [3]), ("k", [4])]


def test_the_worker_waits_for_company_only_up_to_max_wait(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.2, max_sentences=100)
    try:
        start = time.monotonic()
        assert batcher.submit("k", [1]).future.result(timeout=10) == [10]
        waited = time.monotonic() - start
        start = time.monotonic()
        job = batcher.submit("k", [1] * 100)  # fills the budget: no waiting
        assert job.future.result(timeout=10) == [10] * 100
        full = time.monotonic() - start
    finally:
        batcher.stop()
    assert 0.19 <= waited < 5
    assert full < 0.19


def test_a_full_queue_refuses_with_a_retry_hint(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=10, max_queue=3)
    try:
        _held(recorder, batcher)  # running, no longer queued
        batcher.submit("k", [1, 2])
        with pytest.raises(QueueFull) as refused:
            batcher.submit("k", [3, 4])
        assert refused.value.retry_after >= 1
        assert batcher.queued == 2
        batcher.submit("k", [3])  # still fits
        recorder.gate.set()
    finally:
        batcher.stop()


def test_a_failing_job_fails_alone(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.05, max_sentences=100)
    try:
        _held(recorder, batcher)
        good, bad, other = batcher.submit("k", [1]), batcher.submit("k", ["bad"]), batcher.submit("k", [2])
        recorder.gate.set()
        assert good.future.result(timeout=10) == [10]
        assert other.future.result(timeout=10) == [20]
        with pytest.raises(ValueError, match="bad item"):
            bad.future.result(timeout=10)
    finally:
        batcher.stop()


def test_a_request_that_times_out_while_queued_is_never_decoded(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=100)

    async def late() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await batcher.run("k", [99], timeout=0.05)

    try:
        _held(recorder, batcher)
        asyncio.run(late())
        assert batcher.submit("k", [1]).future.cancelled() is False
        recorder.gate.set()
        assert _submit_all(batcher, [("k", [2])]) == [[20]]
    finally:
        batcher.stop()
    assert all(99 not in items for _, items in recorder.calls)


def test_a_request_that_times_out_while_its_batch_gathers_leaves_the_worker_alive(recorder: Recorder) -> None:
    """The worker waits max_wait for company with the oldest job at the head of the queue; that job's
    request giving up meanwhile took it out of the queue, and the worker then popped an empty queue
    and died (every later request timed out), or popped the next job and lost it."""
    batcher = Batcher(recorder, max_wait=0.3, max_sentences=100)

    async def gives_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await batcher.run("k", [99], timeout=0.05)

    try:
        asyncio.run(gives_up())
        time.sleep(0.4)  # past the gathering's deadline
        assert _submit_all(batcher, [("k", [1])]) == [[10]]
        asyncio.run(gives_up())
        later = batcher.submit("other", [2])  # arrives while the abandoned job's batch gathers
        assert later.future.result(timeout=5) == [20]
    finally:
        batcher.stop()
    assert all(99 not in items for _, items in recorder.calls)


def test_a_running_job_whose_request_timed_out_is_told_to_stop() -> None:
    """The decode function sees `abandoned()` turn true once its only request has timed out: the
    server's search then stops instead of decoding for nobody (heed.api.Translator.with_stop)."""
    seen: list[bool] = []
    running = threading.Event()

    def decode(key: Hashable, items: list[Any], abandoned: Any) -> list[Any]:
        running.set()
        deadline = time.monotonic() + 10
        while not abandoned() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(abandoned())
        raise RuntimeError("stopped early")

    batcher = Batcher(decode, max_wait=0.0)

    async def give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await batcher.run("k", [1], timeout=0.2)

    try:
        started = time.monotonic()
        asyncio.run(give_up())
        assert running.is_set()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [True] and time.monotonic() - started < 5
    finally:
        batcher.stop()


def test_stop_cancels_what_is_queued(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.0)
    _held(recorder, batcher)
    queued = batcher.submit("k", [1])
    recorder.gate.set()
    batcher.stop()
    assert queued.future.cancelled() or queued.future.result(timeout=1) == [10]
    with pytest.raises(RuntimeError, match="stopped"):
        batcher.submit("k", [2])


def test_a_costly_job_is_decoded_in_slices_with_later_requests_between_them(recorder: Recorder) -> None:
    """A job over `slice_work` gets one slice a turn and goes to the back of the queue: requests
    that arrived after it run between its slices, and its result is every item, in order."""
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=100, slice_work=10)
    try:
        _held(recorder, batcher)
        big = batcher.submit("big", [1, 2, 3, 4, 5], costs=[4, 4, 4, 4, 4])  # 2 items (8) a turn
        small = [batcher.submit("small", [k], costs=[1]) for k in (7, 8)]
        assert batcher.queued == 7
        recorder.gate.set()
        assert big.future.result(timeout=10) == [10, 20, 30, 40, 50]
        assert [job.future.result(timeout=10) for job in small] == [[70], [80]]
        assert batcher.queued == 0  # a remainder put back is counted once, and none is left
    finally:
        batcher.stop()
    assert recorder.calls[1:] == [("big", [1, 2]), ("small", [7, 8]), ("big", [3, 4]), ("big", [5])]


def test_the_queue_counts_a_sliced_jobs_remainder_once(recorder: Recorder) -> None:
    """What waits is what the queue limit sees: a job between slices counts its remaining sentences
    once, so slicing never makes the queue look fuller than it is (no spurious 503s)."""
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=100, max_queue=6, slice_work=1)
    try:
        _held(recorder, batcher)
        big = batcher.submit("big", [1, 2, 3, 4, 5])
        recorder.gate.set()
        assert big.future.result(timeout=10) == [10, 20, 30, 40, 50]
        for _ in range(20):  # each would be refused if the remainders had been counted twice
            assert batcher.submit("big", [1, 2, 3, 4, 5, 6]).future.result(timeout=10) == [10, 20, 30, 40, 50, 60]
        assert batcher.queued == 0
    finally:
        batcher.stop()


def test_one_item_over_the_slice_still_runs_whole_and_a_cheap_job_is_never_cut(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=100, slice_work=10)
    try:
        assert batcher.submit("k", [1, 2], costs=[50, 1]).future.result(timeout=10) == [10, 20]
        assert batcher.submit("k", [3, 4, 5], costs=[3, 3, 4]).future.result(timeout=10) == [30, 40, 50]
    finally:
        batcher.stop()
    assert recorder.calls == [("k", [1]), ("k", [2]), ("k", [3, 4, 5])]


def test_a_job_larger_than_a_batch_is_cut_at_max_sentences(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=3)
    try:
        assert batcher.submit("k", list(range(1, 8))).future.result(timeout=10) == [10 * k for k in range(1, 8)]
    finally:
        batcher.stop()
    assert [items for _, items in recorder.calls] == [[1, 2, 3], [4, 5, 6], [7]]


def test_a_sliced_job_given_up_between_slices_decodes_no_more(recorder: Recorder) -> None:
    batcher = Batcher(recorder, max_wait=0.0, max_sentences=100, slice_work=1)

    async def give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await batcher.run("big", [1, 2, 3], costs=[1, 1, 1], timeout=0.3)

    try:
        recorder.gate.clear()  # the first slice blocks until after the timeout
        threading.Timer(0.6, recorder.gate.set).start()
        asyncio.run(give_up())
        assert _submit_all(batcher, [("k", [9])]) == [[90]]
    finally:
        batcher.stop()
    assert recorder.calls == [("big", [1]), ("k", [9])]
    assert batcher.queued == 0


def test_submit_refuses_costs_that_do_not_match_the_items(recorder: Recorder) -> None:
    batcher = Batcher(recorder)
    try:
        with pytest.raises(ValueError, match="2 items but 1 costs"):
            batcher.submit("k", [1, 2], costs=[1])
    finally:
        batcher.stop()
