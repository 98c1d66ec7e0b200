"""Device-slot pool: never more than N in use, everyone finishes, no starvation, no stale locks.

Requesters are real processes (flock locks belong to open files, shared across threads).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from meshtest.parent.slots import SlotPool, SlotRequestError, audit_stats, read_audit

CTX = mp.get_context("fork")


def _hold(directory, size, need, hold_s, name, results):
    pool = SlotPool(directory, size)
    t0 = time.time()
    with pool.acquire(need, name, timeout_s=60) as lease:
        assert len(lease.slots) == need and len(set(lease.slots)) == need
        time.sleep(hold_s)
    results.put((name, t0, time.time()))


def test_mixed_requesters_never_exceed_the_pool_and_all_finish(tmp_path):
    needs = [2, 4, 8, 2, 2, 4, 1, 8, 2, 4, 2, 2]
    results = CTX.Queue()
    procs = [CTX.Process(target=_hold, args=(str(tmp_path), 8, n, 0.15, f"t{i}:{n}", results))
             for i, n in enumerate(needs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * len(needs)
    finished = {results.get(timeout=5)[0] for _ in needs}
    assert len(finished) == len(needs)
    stats = audit_stats(read_audit(str(tmp_path)))
    assert stats.peak_in_use <= 8
    assert stats.peak_in_use >= 4  # several requesters really held slots at once
    assert stats.leases == len(needs) and stats.open_leases == 0
    assert 0.0 < stats.utilization <= 1.0


def _stream(directory, stop_at, count):
    pool = SlotPool(directory, 8)
    n = 0
    while time.time() < stop_at:
        with pool.acquire(2, "small", timeout_s=60):
            time.sleep(0.05)
        n += 1
    count.put(n)


def test_large_request_is_not_starved_by_a_stream_of_small_ones(tmp_path):
    stop_at = time.time() + 4.0
    count = CTX.Queue()
    small = [CTX.Process(target=_stream, args=(str(tmp_path), stop_at, count)) for _ in range(6)]
    for p in small:
        p.start()
    time.sleep(0.5)  # the stream is running: 6 requesters × 2 slots want more than 8
    t0 = time.time()
    with SlotPool(str(tmp_path), 8).acquire(8, "big", timeout_s=3.0) as lease:
        waited = time.time() - t0
        assert lease.slots == list(range(8))
    for p in small:
        p.join(30)
    assert waited < 3.0 and time.time() < stop_at + 5  # got all 8 while the stream still ran
    assert sum(count.get(timeout=5) for _ in small) > 10


def _hold_forever(directory, ready):
    lease = SlotPool(directory, 8).acquire(8, "doomed")
    ready.put(lease.slots)
    time.sleep(600)


def test_killed_holder_frees_its_slots_at_once(tmp_path):
    ready = CTX.Queue()
    p = CTX.Process(target=_hold_forever, args=(str(tmp_path), ready))
    p.start()
    assert ready.get(timeout=10) == list(range(8))
    with pytest.raises(TimeoutError):
        SlotPool(str(tmp_path), 8).acquire(1, "blocked", timeout_s=0.3)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    t0 = time.time()
    with SlotPool(str(tmp_path), 8).acquire(8, "after", timeout_s=5):
        assert time.time() - t0 < 1.0
    assert audit_stats(read_audit(str(tmp_path))).open_leases == 1  # the killed one never released


def test_request_above_pool_size_fails_fast_and_says_what_to_change(tmp_path):
    with pytest.raises(SlotRequestError,
                       match=r"cases/x.py needs 16 device slot\(s\) but the pool has 8; raise \[meshtest\].slots"):
        SlotPool(str(tmp_path), 8).acquire(16, "cases/x.py")


def test_audit_stats_peak_and_utilization():
    recs = [
        {"t": 0.0, "event": "acquire", "target": "a", "slots": [0, 1, 2, 3], "pid": 1, "size": 8},
        {"t": 1.0, "event": "acquire", "target": "b", "slots": [4, 5, 6, 7], "pid": 2, "size": 8},
        {"t": 2.0, "event": "release", "target": "a", "slots": [0, 1, 2, 3], "pid": 1, "size": 8},
        {"t": 2.0, "event": "acquire", "target": "c", "slots": [0, 1], "pid": 3, "size": 8},
        {"t": 4.0, "event": "release", "target": "b", "slots": [4, 5, 6, 7], "pid": 2, "size": 8},
        {"t": 4.0, "event": "release", "target": "c", "slots": [0, 1], "pid": 3, "size": 8},
    ]
    s = audit_stats(recs)
    assert s.peak_in_use == 8  # a's release at t=2 comes before c's acquire at t=2
    assert s.span_s == 4.0
    assert s.utilization == pytest.approx((4 * 2 + 4 * 3 + 2 * 2) / (8 * 4))


def test_a_killed_holders_lease_ends_when_its_slots_are_taken_again():
    recs = [
        {"t": 0.0, "event": "acquire", "target": "killed", "slots": [0, 1, 2, 3, 4, 5, 6, 7], "pid": 1, "size": 8},
        {"t": 5.0, "event": "acquire", "target": "next", "slots": [0, 1, 2, 3, 4, 5, 6, 7], "pid": 2, "size": 8},
        {"t": 9.0, "event": "release", "target": "next", "slots": [0, 1, 2, 3, 4, 5, 6, 7], "pid": 2, "size": 8},
    ]
    s = audit_stats(recs)
    assert s.peak_in_use == 8  # never 16: the kernel freed the killed holder's slots before "next" got them
    assert (s.leases, s.open_leases) == (1, 1)
    assert s.utilization == pytest.approx(1.0)
