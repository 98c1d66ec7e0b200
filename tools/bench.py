#!/usr/bin/env python3
"""Benchmark (prints figures; asserts nothing): suite walls and launches, and slot packing.

Usage: ``python3 tools/bench.py [--skip-suite] [--skip-packing] [--scale 0.1]
[--verdicts --python PY [--before REF]] [--pants-before REF]``, or, for the figures of the
speed work side by side, ``python3 tools/bench.py [--lanes --python PY] [--model npu8]
[--pants-before REF]``: ``--lanes``, the one-process lane against the real lane on the
``cpu_local`` cases and a one-op selection over three meshes against its slowest single launch;
``--model npu8``, the device-time model of ``tools/packing_model.py`` (the level0 plan before,
now and with ``--pack fill`` on 8 NPUs); ``--pants-before REF``, the main job at REF and HEAD.

1. Suite, in a throwaway clone (the working tree is never edited), with pantsd off:
   cold ``cpu_level0`` run (a fresh test-env value makes every cache key new), identical warm rerun, a run
   after a one-line edit of one case file (full ``cases::``, and ``tools/pr-test`` which
   selects only that file). Launches are counted from the slot pool's audit log.
2. Packing on a simulated 8-slot pool: a seed-like mix of 2-, 4- and 8-rank targets (per-launch
   costs measured on this machine: 4.4 / 6.5 / 11.0 s for 2 / 4 / 8 ranks, plus case time)
   runs through the real :class:`meshtest.parent.slots.SlotPool` with 4 concurrent requesters (Pants'
   executor as configured), durations scaled by ``--scale``; its slot-time utilization is set
   next to the TP plan's plan (the 8-card packing rule: groups packed first-fit-decreasing into 8-card
   batches that run one after another, each lasting as long as its longest group) on the same mix.
3. ``--verdicts`` (needs ``--python``, an interpreter with torch: see docs/running.md "Running without
   Pants"): the per-case cost of case isolation (state snapshot, reseed, compare; in one
   process), the per-case cost of collective checks (a 2-rank DTensor workload with and without
   ``TORCH_DISTRIBUTED_DEBUG=DETAIL``), and with ``--before REF`` the cpu_level0 main job's wall
   through the CLI (``python -m meshtest run cases/torch/case_*.py --tag cpu_level0``) at REF and
   at the working tree, alternated twice so machine noise hits both, side by side.
4. ``--warm --python PY``: the warm launcher (one import of torch per run, each launch forked
   from it: ``meshtest.parent.warm``) against a new interpreter per launch, on a run of four
   launches, alternated twice: wall, the machine's CPU seconds and each launch's wall per mode.
5. ``--pants-before REF``: the main job as README runs it (``./pants --tag=cpu_level0 test
   cases::``, cold: a fresh test-env value per run, pantsd off) in a clone at REF and a clone at
   HEAD, alternated (REF, HEAD, REF, HEAD), with the test processes and launches each started.
6. ``--per-case [ROOT ...]``: the in-case seconds of each op case (its slowest rank) in the
   results under ROOT (default ``dist/test``: the main job's and the one-process lane's, as
   ``.ci/run`` leaves them), by lane and origin (generated or hand-written): count, total, mean,
   median, 90th percentile.
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


def bench_main_job_pants(before: str) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as old, tempfile.TemporaryDirectory() as new:
        subprocess.run(["git", "clone", "-q", ROOT, old], check=True)
        subprocess.run(["git", "checkout", "-q", before], cwd=old, check=True)
        subprocess.run(["git", "clone", "-q", ROOT, new], check=True)
        for _ in range(2):
            for name, tree in ((before, old), ("HEAD", new)):
                nonce = f"--test-extra-env-vars=+['MESHTEST_BENCH_NONCE={time.time_ns()}']"
                rows.append((name, _timed(["./pants", nonce, "--tag=cpu_level0", "test", "cases::"], tree)))
    print("\ncold `./pants --tag=cpu_level0 test cases::`, alternated")
    print(f"{'tree':14} {'wall s':>8} {'exit':>5} {'launches':>9}")
    for name, (wall, rc, launches) in rows:
        print(f"{name:14} {wall:8.1f} {rc:5d} {launches:9d}")


def seed_like_mix(rng: random.Random) -> List[Tuple[int, float]]:
    """(ranks, seconds) per target: many 2- and 4-rank targets, a few 8-rank ones."""
    mix = [2] * 14 + [4] * 10 + [8] * 3
    rng.shuffle(mix)
    return [(k, LAUNCH_COST_S[k] + rng.uniform(0.5, 4.0)) for k in mix]


def serial_first_fit(jobs: Sequence[Tuple[int, float]], size: int = 8) -> Tuple[float, float, int]:
    """The 8-card packing rule: first-fit-decreasing into ``size``-card batches run one after another.

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


_ISOLATION = """
import time
from meshtest.platforms.torch.gloo import TorchGlooBackend
from meshtest.rank.entry import case_seed, state_changes
b, n = TorchGlooBackend(), 2000
t = time.perf_counter()
for i in range(n):
    before = b.global_state()
    b.seed(case_seed(f"c{i}"))
    state_changes(before, b.global_state())
print((time.perf_counter() - t) / n * 1e6)
"""

_COLLECTIVES = """
import os, sys, time, torch, torch.distributed as dist
if sys.argv[1] == "on":
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()
dist.init_process_group("gloo")
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
mesh = init_device_mesh("cpu", (2,))
def case():  # distribute two inputs, a matmul, a reduction, a gather: 4 collectives
    x = distribute_tensor(torch.randn(16, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16, 16), mesh, [Replicate()])
    return (x @ w).relu().sum(dim=1).full_tensor()
for _ in range(5):
    case()
dist.barrier()
t, n = time.perf_counter(), 200
for _ in range(n):
    case()
dist.barrier()
if dist.get_rank() == 0:
    print("MS", (time.perf_counter() - t) / n * 1e3, flush=True)
os._exit(0)
"""


def _run_py(python: str, code: str, *args: str, cwd: str = ROOT) -> str:
    env = {**os.environ, "PYTHONPATH": os.path.join(cwd, "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([python, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout


def _collectives_ms(python: str, mode: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "collectives.py")
        with open(script, "w") as f:
            f.write(_COLLECTIVES)
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", script, mode]
        out = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                             check=True).stdout
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("MS ")))


def _main_job_wall(python: str, tree: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        cmd = [python, "-m", "meshtest", "run", *sorted(_case_files(tree)), "--tag", "cpu_level0",
               "--artifacts-dir", out, "--slot-dir", os.path.join(out, "slots")]
        t0 = time.monotonic()
        path = os.pathsep.join([os.path.join(tree, "src"), tree])
        subprocess.run(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": path},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.monotonic() - t0


def _case_files(tree: str) -> List[str]:
    """Every torch case file of ``tree`` (op cases, the TP suite, the training net)."""
    found = []
    for d, _, names in os.walk(os.path.join(tree, "cases", "torch")):
        found.extend(os.path.relpath(os.path.join(d, n), tree) for n in names
                     if n.startswith("case_") and n.endswith(".py"))
    return found


def bench_verdicts(python: str, before: str) -> None:
    iso_us = float(_run_py(python, _ISOLATION).strip())
    off, on = _collectives_ms(python, "off"), _collectives_ms(python, "on")
    print("\nverdict features, per case")
    print(f"  isolation (snapshot + reseed + compare, torch): {iso_us:8.1f} us")
    print(f"  2-rank DTensor case, 4 collectives: {off:6.2f} ms; with collective checks {on:6.2f} ms "
          f"(+{on - off:.2f} ms, x{on / off:.1f})")
    if not before:
        return
    with tempfile.TemporaryDirectory() as old:
        subprocess.run(["git", "worktree", "add", "-q", "--detach", old, before], cwd=ROOT, check=True)
        try:
            walls: dict = {before: [], "working tree": []}
            for _ in range(2):
                walls[before].append(_main_job_wall(python, old))
                walls["working tree"].append(_main_job_wall(python, ROOT))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", old], cwd=ROOT, check=False)
    print("  cpu_level0 main job through the CLI (every torch case file), alternated:")
    for name, ws in walls.items():
        print(f"    {name:14} " + ", ".join(f"{w:.1f} s" for w in ws) + f"  (best {min(ws):.1f} s)")


def _cli_wall(python: str, args: Sequence[str]) -> Tuple[float, int, str]:
    """(wall seconds, exit code, summary line) of ``python -m meshtest run ARGS`` from the repository root."""
    with tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        proc = subprocess.run([python, "-m", "meshtest", "run", *args, "--artifacts-dir", os.path.join(out, "a"),
                               "--slot-dir", os.path.join(out, "slots")], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])})
        wall = time.monotonic() - t0
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("meshtest: ") and "passed" in ln]
    return wall, proc.returncode, last[-1] if last else proc.stderr.strip()[-200:]


#: A one-op selection whose cases span three meshes ((2,), (4,), (2, 2)): the sort op's
#: ``cpu_level0`` cases (issue 14's example of serial launches).
ONE_OP = ("cases/torch/case_sort.py",)


def bench_lanes(python: str) -> None:
    """The one-process lane against the real lane on the same cases, and a one-op selection over
    three meshes against its slowest single-mesh launch, side by side."""
    import glob

    files = sorted(glob.glob(os.path.join(ROOT, "cases", "torch", "case_*.py")))
    files = [os.path.relpath(f, ROOT) for f in files] + ["cases/torch/training/case_train_l0_logic.py"]
    rows = [("local lane  --tag cpu_local", _cli_wall(python, [*files, "--tag=cpu_local"])),
            ("real lane   --tag cpu_local --lane ranks",
             _cli_wall(python, [*files, "--tag=cpu_local", "--lane=ranks"]))]
    for name, (wall, rc, line) in rows:
        print(f"  {name:42} {wall:6.1f} s  exit {rc}  {line}")
    sel = _cli_wall(python, [*ONE_OP, "--tag=cpu_level0"])
    # under Pants the target's resource tag is its largest mesh: 4 slots, so one launch after the other
    tagged = _cli_wall(python, [*ONE_OP, "--tag=cpu_level0", "--device-need=4"])
    fill = _cli_wall(python, [*ONE_OP, "--tag=cpu_level0", "--pack=fill"])
    singles = [(m, _cli_wall(python, [*ONE_OP, "--tag=cpu_level0", f"--tag={m}"])) for m in ("mesh:2", "mesh:4")]
    slowest = max(w for _, (w, _, _) in singles)
    print(f"  one op over 3 meshes ({ONE_OP[0]} cpu_level0): default (slots for its launches at once) "
          f"{sel[0]:.1f} s, --device-need 4 (a Pants target's tag: one after the other) {tagged[0]:.1f} s, "
          f"--pack fill {fill[0]:.1f} s; single launches "
          + ", ".join(f"{m} {w:.1f} s" for m, (w, _, _) in singles)
          + f"; ratio to the slowest: default {sel[0] / slowest:.2f}, device-need 4 {tagged[0] / slowest:.2f}, "
            f"fill {fill[0] / slowest:.2f}")


def bench_warm(python: str, rounds: int = 2) -> None:
    """The warm launcher against a new interpreter per launch (``MESHTEST_WARM=0``): a run of four
    launches (three crashing drills of cases/faults/case_faults.py, each ending its launch, and
    the cases after them), alternated ``rounds`` times; per mode, the run's wall, the CPU seconds
    the whole machine spent meanwhile (``/proc/stat``, user + system: the fork server's forks are
    not this process's children, so ``RUSAGE_CHILDREN`` would miss them; run it on a quiet
    machine), and each launch's wall from the runner's ``launch ...`` lines."""
    import re

    def machine_cpu_s() -> float:
        with open("/proc/stat", encoding="utf-8") as f:
            user, nice, system = (int(v) for v in f.readline().split()[1:4])
        return (user + nice + system) / os.sysconf("SC_CLK_TCK")

    cases = ["fault_exit", "fault_after_exit", "fault_segv", "fault_after_segv", "fault_sigkill",
             "fault_after_sigkill"]
    print("warm launcher vs a new interpreter per launch (4 launches, cases/faults/case_faults.py crash drills):")
    for r in range(rounds):
        for mode in ("cold", "warm"):
            with tempfile.TemporaryDirectory() as tmp:
                env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"),
                       "MESHTEST_WARM": "1" if mode == "warm" else "0"}
                before = machine_cpu_s()
                t0 = time.monotonic()
                cmd = [python, "-m", "meshtest", "run", "cases/faults/case_faults.py", "--tag", "cpu_faults",
                       *[a for c in cases for a in ("--case", c)], "--artifacts-dir", os.path.join(tmp, "o"),
                       "--slot-dir", os.path.join(tmp, "s")]
                proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
                wall = time.monotonic() - t0
                cpu = machine_cpu_s() - before
                launches = re.findall(r"^launch (\S+): \d+ ranks, \d+ case\(s\), ([0-9.]+)s", proc.stdout, re.M)
                print(f"  round {r + 1} {mode}: wall {wall:5.1f} s, machine CPU {cpu:5.1f} s, launches "
                      + ", ".join(f"{name} {sec} s" for name, sec in launches))


def bench_per_case(roots) -> None:
    """In-case seconds per op case (each case's slowest rank, ``CaseOutcome.slowest_s``) from
    the results under ``roots`` (``./pants test`` leaves them in ``dist/test``), by lane (the
    one-process lane's launch group is ``local``) and by origin (generated from OpInfo, or
    hand-written): cases, total, mean, median and 90th percentile, in seconds. Run after the
    main job and the one-process lane (``.ci/run`` runs both)."""
    import statistics

    from meshtest.report.lane_diff import LOCAL_GROUP
    from meshtest.report.results import read_results, results_files

    rows: dict = {}
    for path in results_files(roots):
        for o in read_results(path):
            if o.kind != "op" or o.slowest_s <= 0:
                continue
            lane = "one-process lane" if o.group == LOCAL_GROUP else "real ranks"
            origin = "generated" if "/opinfo/" in o.file.replace(os.sep, "/") else "hand-written"
            rows.setdefault((lane, origin), {})[f"{o.file}::{o.case}"] = o.slowest_s  # newest result per case
    print(f"== in-case seconds per op case (slowest rank), from {', '.join(roots)}")
    print(f"  {'lane':18} {'origin':13} {'cases':>6} {'total s':>8} {'mean s':>8} {'median s':>9} {'p90 s':>7}")
    for (lane, origin), by_case in sorted(rows.items()):
        xs = sorted(by_case.values())
        p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
        print(f"  {lane:18} {origin:13} {len(xs):6d} {sum(xs):8.1f} {statistics.mean(xs):8.3f} "
              f"{statistics.median(xs):9.3f} {p90:7.3f}")
    if not rows:
        print("  no op case results (run the main job and the one-process lane first)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-suite", action="store_true")
    ap.add_argument("--skip-packing", action="store_true")
    ap.add_argument("--scale", type=float, default=0.1, help="time scale of the packing simulation")
    ap.add_argument("--verdicts", action="store_true", help="the cost of case isolation and collective checks")
    ap.add_argument("--python", default="", help="an interpreter with torch (for --verdicts)")
    ap.add_argument("--before", default="", metavar="REF", help="with --verdicts: main job wall at REF vs now")
    ap.add_argument("--pants-before", default="", metavar="REF",
                    help="the cold Pants main job at REF vs HEAD, alternated twice")
    ap.add_argument("--model", default="", choices=("", "npu8", "cpu8"),
                    help="the device-time model of a gate's plan (tools/packing_model.py): before/launches/fill; "
                         "with --model or --lanes only those (and --pants-before) run")
    ap.add_argument("--tag", default="cpu_level0", help="with --model: the gate")
    ap.add_argument("--durations", nargs="*", default=[os.path.join(ROOT, "dist", "test")],
                    help="with --model: results of earlier real-lane runs (case durations)")
    ap.add_argument("--lanes", action="store_true",
                    help="the one-process lane vs the real lane, and a one-op selection (needs --python)")
    ap.add_argument("--warm", action="store_true",
                    help="the warm launcher vs a new interpreter per launch (needs --python); only that runs")
    ap.add_argument("--per-case", nargs="*", metavar="ROOT", default=None,
                    help="in-case seconds per op case by lane and origin, from results under ROOT "
                         "(default dist/test); only that runs")
    args = ap.parse_args()
    if args.per_case is not None:
        bench_per_case(args.per_case or [os.path.join(ROOT, "dist", "test")])
        return 0
    if args.warm:
        if not args.python:
            ap.error("--warm needs --python: an interpreter with torch installed")
        bench_warm(args.python)
        return 0
    if args.lanes and not args.python:
        ap.error("--lanes needs --python: an interpreter with torch installed")
    if args.model or args.lanes:  # the figures of issue 14, side by side in one run
        if args.lanes:
            bench_lanes(args.python)
        if args.model:
            import packing_model  # pants: no-infer-dep (tools/packing_model.py: a dependency in tools/BUILD)

            packing_model.report(args.tag, args.model, args.durations)
        if args.pants_before:
            bench_main_job_pants(args.pants_before)
        return 0
    if not args.skip_suite:
        bench_suite()
    if not args.skip_packing:
        bench_packing(args.scale)
    if args.verdicts:
        if not args.python:
            ap.error("--verdicts needs --python: an interpreter with torch installed")
        bench_verdicts(args.python, args.before)
    if args.pants_before:
        bench_main_job_pants(args.pants_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
