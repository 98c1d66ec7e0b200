#!/usr/bin/env python3
"""Benchmark (prints figures; asserts nothing): suite walls and launches, and slot packing.

Usage: ``python3 tools/bench.py [--skip-suite] [--skip-packing] [--scale 0.1]``

1. Suite, in a throwaway clone (the working tree is never edited), with pantsd off:
   cold ``cpu_level0`` run (a fresh test-env value makes every cache key new), identical warm rerun, a run
   after a one-line edit of one case file (full ``cases::``, and ``tools/pr-test`` which
   selects only that file). Launches are counted from the slot pool's audit log.
2. Packing on a simulated 8-slot pool: a seed-like mix of 2-, 4- and 8-rank targets (per-launch
   costs measured on this machine: 4.4 / 6.5 / 11.0 s for 2 / 4 / 8 ranks, plus case time)
   runs through the real :class:`meshtest.parent.slots.SlotPool` with 4 concurrent requesters (Pants'
   executor as configured), durations scaled by ``--scale``; its slot-time utilization is set
   next to the seed's plan (seed 000 §8.6: groups packed first-fit-decreasing into 8-card
   batches that run one after another, each lasting as long as its longest group) on the same mix.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import List, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from meshtest.parent.slots import SlotPool, audit_stats, read_audit  # noqa: E402

PANTS_SLOT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "pants", "named_caches", "meshtest_slots")
LAUNCH_COST_S = {2: 4.4, 4: 6.5, 8: 11.0}  # offline-pants notes, torchrun init + mesh + destroy


def _timed(cmd: Sequence[str], cwd: str) -> Tuple[float, int, int]:
    """(wall seconds, exit code, launches recorded by the slot pool meanwhile)."""
    since = time.time()
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env={**os.environ, "PANTS_PANTSD": "false"})
    wall = time.monotonic() - t0
    launches = audit_stats([r for r in read_audit(PANTS_SLOT_DIR) if r["t"] >= since]).launches
    return wall, proc.returncode, launches


def bench_suite() -> None:
    with tempfile.TemporaryDirectory() as clone:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        # A fresh value in the test environment is part of every test process's cache key, so
        # the first run is cold (nothing cached) and later runs can hit what it cached.
        nonce = f"--test-extra-env-vars=+['MESHTEST_BENCH_NONCE={time.time_ns()}']"
        main = ["./pants", nonce, "--tag=cpu_level0", "test", "cases::"]
        rows = [("cold full cpu_level0", _timed(main, clone))]
        rows.append(("warm, no change", _timed(main, clone)))
        with open(os.path.join(clone, "cases/torch/case_sort.py"), "a") as f:
            f.write("\n# bench edit\n")
        rows.append(("one case file edited: tools/pr-test",
                     _timed(["tools/pr-test", "HEAD", "test", nonce, "--tag=cpu_level0"], clone)))
        rows.append(("one case file edited: full cases::", _timed(main, clone)))
    print(f"{'suite run':40} {'wall s':>8} {'exit':>5} {'launches':>9}")
    for name, (wall, rc, launches) in rows:
        print(f"{name:40} {wall:8.1f} {rc:5d} {launches:9d}")


def seed_like_mix(rng: random.Random) -> List[Tuple[int, float]]:
    """(ranks, seconds) per target: many 2- and 4-rank targets, a few 8-rank ones."""
    mix = [2] * 14 + [4] * 10 + [8] * 3
    rng.shuffle(mix)
    return [(k, LAUNCH_COST_S[k] + rng.uniform(0.5, 4.0)) for k in mix]


def serial_first_fit(jobs: Sequence[Tuple[int, float]], size: int = 8) -> Tuple[float, float, int]:
    """Seed 000 §8.6: first-fit-decreasing into ``size``-card batches run one after another.

    :returns: (makespan, slot-time utilization, number of batches).
    """
    batches: List[List[Tuple[int, float]]] = []
    for k, d in sorted(jobs, key=lambda j: -j[0]):
        for b in batches:
            if sum(x for x, _ in b) + k <= size:
                b.append((k, d))
                break
        else:
            batches.append([(k, d)])
    makespan = sum(max(d for _, d in b) for b in batches)
    return makespan, sum(k * d for k, d in jobs) / (size * makespan), len(batches)


def _worker(slot_dir: str, queue, scale: float) -> None:
    pool = SlotPool(slot_dir, 8)
    while True:
        job = queue.get()
        if job is None:
            return
        k, d, name = job
        with pool.acquire(k, name):
            time.sleep(d * scale)


def simulated_pool(jobs: Sequence[Tuple[int, float]], scale: float, workers: int = 4) -> Tuple[float, float, int]:
    """Run ``jobs`` through a real SlotPool with ``workers`` concurrent requesters (FIFO queue).

    :returns: (makespan in unscaled seconds, slot-time utilization, peak slots in use).
    """
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as slot_dir:
        queue = ctx.Queue()
        for i, (k, d) in enumerate(jobs):
            queue.put((k, d, f"t{i}:w{k}"))
        for _ in range(workers):
            queue.put(None)
        procs = [ctx.Process(target=_worker, args=(slot_dir, queue, scale)) for _ in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        s = audit_stats(read_audit(slot_dir))
    return s.span_s / scale, s.utilization, s.peak_in_use


def bench_packing(scale: float) -> None:
    jobs = seed_like_mix(random.Random(0))
    work = sum(k * d for k, d in jobs)
    ff_make, ff_util, ff_batches = serial_first_fit(jobs)
    sim_make, sim_util, peak = simulated_pool(jobs, scale)
    print(f"\npacking on an 8-slot pool: {len(jobs)} targets "
          f"({sum(k == 2 for k, _ in jobs)}x2, {sum(k == 4 for k, _ in jobs)}x4, "
          f"{sum(k == 8 for k, _ in jobs)}x8 ranks), "
          f"{work:.0f} slot-seconds of work")
    print(f"{'schedule':46} {'makespan s':>10} {'slot-time used':>15}")
    print(f"{'seed: serial first-fit 8-card batches (' + str(ff_batches) + ')':46} {ff_make:10.1f} {ff_util:15.1%}")
    print(f"{'meshtest: slot pool, 4 requesters (peak ' + str(peak) + ')':46} {sim_make:10.1f} {sim_util:15.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-suite", action="store_true")
    ap.add_argument("--skip-packing", action="store_true")
    ap.add_argument("--scale", type=float, default=0.1, help="time scale of the packing simulation")
    args = ap.parse_args()
    if not args.skip_suite:
        bench_suite()
    if not args.skip_packing:
        bench_packing(args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
