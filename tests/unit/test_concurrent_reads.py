"""`run_all`, the bounded pool a lookup's reads run in: results in order, at most `threads` at
once, and fail closed as a loop would (the earliest failing task's error; tasks not started are
cancelled; none still running when it raises)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lethe_shared.index.concurrent_reads import run_all

pytestmark = pytest.mark.lambda_runtime


def test_results_come_in_the_tasks_order_from_several_threads() -> None:
    names: set[str] = set()
    barrier = threading.Barrier(3, timeout=5)

    def task(i: int) -> Callable[[], int]:
        def run() -> int:
            names.add(threading.current_thread().name)
            if i < 3:
                barrier.wait()  # three tasks at once: the pool really runs them together
            time.sleep(0.001 * (10 - i))
            return i * i

        return run

    assert run_all([task(i) for i in range(10)], threads=4) == [i * i for i in range(10)]
    assert len(names) > 1
    assert all(n.startswith("lethe-lookup") for n in names)


def test_at_most_threads_tasks_run_at_once() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def task() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        with lock:
            running -= 1

    run_all([task] * 20, threads=3)
    assert most == 3


def test_one_thread_or_one_task_runs_here() -> None:
    here = threading.current_thread().name
    assert run_all([lambda: threading.current_thread().name] * 3, threads=1) == [here] * 3
    assert run_all([lambda: threading.current_thread().name], threads=8) == [here]
    assert run_all([], threads=8) == []


def test_the_earliest_failing_task_s_error_is_raised_after_the_running_ones_end() -> None:
    finished: list[int] = []
    started: list[int] = []
    late_failure = threading.Event()

    def task(i: int) -> Callable[[], int]:
        def run() -> int:
            started.append(i)
            if i == 1:
                late_failure.wait(5)  # fails after task 3 has failed
                raise KeyError("task 1")
            if i == 3:
                late_failure.set()
                raise ValueError("task 3")
            time.sleep(0.05)
            finished.append(i)
            return i

        return run

    with pytest.raises(KeyError, match="task 1"):  # what the loop would have raised
        run_all([task(i) for i in range(40)], threads=4)
    ended = set(finished)
    time.sleep(0.2)
    assert set(finished) == ended  # nothing still running once it raised
    assert len(started) < 40  # the tasks not yet started were cancelled


def test_a_single_failure_is_raised_never_a_partial_list() -> None:
    def task(i: int) -> Callable[[], int]:
        def run() -> int:
            if i == 6:
                raise OSError("segment unreadable")
            return i

        return run

    with pytest.raises(OSError, match="segment unreadable"):
        run_all([task(i) for i in range(8)], threads=8)
