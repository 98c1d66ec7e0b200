"""``python -m meshtest run`` with pytest's words, end to end in the one-process lane: ``--lf``
reruns only what failed, a fixed case leaves the cache, ``--ff`` runs last failures first,
``-q`` prints only failing cases, ``--durations=N`` lists the slowest (~25 s)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import meshtest
from tests.helpers import case_file

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))


def _body(bad_fixed: bool) -> str:
    # the broken op fails only on the sharded input (the reference is the op on the full tensor)
    bad = "x * 2.0" if bad_fixed else "(x * 3.0 if hasattr(x, 'placements') else x * 2.0)"
    return (
        "def ok(x):\n    return x * 2.0\n\n"
        f"def bad(x):\n    return {bad}\n\n"
        "register(OpShardCase(name='a1', fn=ok, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)],\n"
        "                     mesh_shape=(2,), tags=('cpu_local',)))\n"
        "register(OpShardCase(name='a2', fn=ok, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)],\n"
        "                     mesh_shape=(2,), tags=('cpu_local',)))\n"
        "register(OpShardCase(name='b1', fn=bad, inputs=[InputSpec((4, 4))],\n"
        "                     placements=[(Shard(0),)], mesh_shape=(2,), tags=('cpu_local',)))\n"
    )


def _run(tmp_path, path, *args):
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", path, "--lane", "local", "--artifacts-dir",
                           str(out), "--cache-dir", str(tmp_path / "cache"), "--slot-dir", str(tmp_path / "slots"),
                           *args], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT},
                          timeout=300)
    ran = [json.loads(ln)["case"] for ln in (out / "results.jsonl").read_text().splitlines()]
    return proc, ran


def test_lf_reruns_the_failure_until_it_passes_then_everything(tmp_path):
    path = case_file(tmp_path, "case_lf.py", _body(bad_fixed=False))
    proc, ran = _run(tmp_path, path, "-q", "--durations", "2")
    assert proc.returncode == 1 and sorted(ran) == ["a1", "a2", "b1"]
    assert "FAIL    b1" in proc.stdout and "PASS    a1" not in proc.stdout  # -q: failing cases only
    assert "slowest 2 case durations" in proc.stdout
    proc, ran = _run(tmp_path, path, "--lf")
    assert proc.returncode == 1 and ran == ["b1"], proc.stdout[-2000:]
    assert "--lf: running the 1 case(s) that failed last time, 2 deselected" in proc.stdout
    proc, ran = _run(tmp_path, path, "--ff", "--no-fail-fast")
    assert ran[0] == "b1" and sorted(ran) == ["a1", "a2", "b1"]
    case_file(tmp_path, "case_lf.py", _body(bad_fixed=True))
    proc, ran = _run(tmp_path, path, "--lf")
    assert proc.returncode == 0 and ran == ["b1"]
    proc, ran = _run(tmp_path, path, "--lf", "-k", "a1 or b1")
    assert proc.returncode == 0 and sorted(ran) == ["a1", "b1"]  # nothing failed last: all that -k selects
    assert "no case of this selection failed last time" in proc.stdout
