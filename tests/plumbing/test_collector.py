"""heed.plumbing.collector: the cyclic collector off inside a pause, back as it was after it,
across nesting, threads and exceptions."""
from __future__ import annotations

import gc
import threading

import pytest

from heed.plumbing.collector import collector_paused


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_off_inside_and_on_again_after_even_when_the_block_raises():
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_the_last_thread_to_finish_switches_it_back_on():
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause is still open
    release.set()
    thread.join(10)
    assert gc.isenabled()
