#!/usr/bin/env python3
"""Start-up of launches placed by Ray, printed (not a timed test): a Ray cluster on this machine
(``ray.cluster_utils.Cluster``, no dashboard) and an 8-rank case launched on it.

Prints, each the median of ``--repeat`` runs:

- the cluster's own start-up: a head node and one more node, up and registered
  (``Cluster(...)`` + ``add_node`` + ``wait_for_nodes``);
- launch start-up (from the launch plan written to the first case started on some rank, read
  from the launch's files) of the same 8-rank case (``cases/faults/case_faults_nodes.py``'s
  ``nodes_all_reduce_8``) three ways: this machine's own launch (``--executor local``), one
  node of 8 slots (a one-node cluster), and two nodes of 4 slots (4 + 4, the forked launchers
  joined through node 0's store);
- the whole ``python -m meshtest run`` wall of each (a driver joining the cluster included).

Usage: ``python tools/bench_ray.py [--repeat 3] [--python PY]`` with ``PY`` an interpreter that has
torch and Ray (the ``ray`` resolve's requirements: ``3rdparty/python/requirements-ray.txt``).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = "cases/faults/case_faults_nodes.py::nodes_all_reduce_8"


def startup_s(out: str) -> float:
    """Seconds from the launch plan's write to the first ``case_started`` of any rank."""
    (plan,) = glob.glob(os.path.join(out, "ranks", "*", "plan.json"))
    first = min(doc["t"] for path in glob.glob(os.path.join(os.path.dirname(plan), "rank*.jsonl"))
                for doc in map(json.loads, open(path, encoding="utf-8").read().splitlines())
                if doc["event"] == "start")
    return first - os.path.getmtime(plan)


def run_case(python: str, executor: str, work: str) -> tuple:
    out = tempfile.mkdtemp(prefix="bench-ray-", dir=work)
    t0 = time.monotonic()
    proc = subprocess.run([python, "-m", "meshtest", "run", CASE, "--tag", "cpu_faults", "--executor", executor,
                           "--artifacts-dir", out, "--slot-dir", os.path.join(out, "slots")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{executor}: the run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return startup_s(out), wall


def cluster(nodes: int, slots: int):
    from ray.cluster_utils import Cluster  # pants: no-infer-dep (run with an interpreter of the `ray` resolve)

    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=2, resources={"meshtest_slot": slots},
                                                           include_dashboard=False))
    for _ in range(nodes - 1):
        c.add_node(num_cpus=2, resources={"meshtest_slot": slots})
    c.wait_for_nodes()
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-ray-")
    rows = {"local": [], "ray 1 x 8": [], "ray 2 x 4": []}
    cluster_s = []
    for _ in range(args.repeat):
        rows["local"].append(run_case(args.python, "local", work))
        for label, nodes, slots in (("ray 1 x 8", 1, 8), ("ray 2 x 4", 2, 4)):
            t0 = time.monotonic()
            c = cluster(nodes, slots)
            if nodes == 2:
                cluster_s.append(time.monotonic() - t0)
            try:
                rows[label].append(run_case(args.python, f"ray:{c.address}", work))
            finally:
                c.shutdown()
    print(f"two-node cluster start-up (head + 1 node, registered): median {statistics.median(cluster_s):.1f} s "
          f"of {[round(s, 1) for s in cluster_s]}")
    print(f"{'8-rank launch':<12} {'start-up s (median)':>20} {'run wall s (median)':>20}  runs")
    for label, found in rows.items():
        ups, walls = [s for s, _ in found], [w for _, w in found]
        print(f"{label:<12} {statistics.median(ups):>20.2f} {statistics.median(walls):>20.2f}  "
              f"start-ups {[round(s, 2) for s in ups]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
