"""tools/merge_shards.py: the dist/test trees of a sharded run become one tree (one index, one
summary); a case file or run reported by two shards stops the merge."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MERGE = Path(os.path.abspath(__file__)).parents[2] / "tools" / "merge_shards.py"


def _run_dir(shard: Path, name: str, files):
    d = shard / name
    (d / "ranks").mkdir(parents=True)
    (d / "results.jsonl").write_text("")
    for f in files:
        t = d / "targets" / f.replace("/", ".")
        t.mkdir(parents=True)
        (t / "results.jsonl").write_text("")


def _merge(out, *shards):
    return subprocess.run([sys.executable, str(MERGE), str(out), *map(str, shards)], capture_output=True, text=True)


def test_runs_of_all_shards_land_in_one_tree_with_their_origin(tmp_path):
    s0, s1 = tmp_path / "s0", tmp_path / "s1"
    _run_dir(s0, "cases.torch.case_a.py+1", ["cases/torch/case_a.py", "cases/torch/case_b.py"])
    _run_dir(s1, "cases.torch.case_c.py", ["cases/torch/case_c.py"])
    (s1 / "index.html").write_text("a shard's own index is not a run")
    r = _merge(tmp_path / "out", s0, s1)
    assert r.returncode == 0, r.stderr
    assert "2 run(s), 3 case file(s) from 2 shard(s)" in r.stdout
    assert sorted(os.listdir(tmp_path / "out")) == ["cases.torch.case_a.py+1", "cases.torch.case_c.py", "shards.json"]
    doc = json.loads((tmp_path / "out" / "shards.json").read_text())
    assert doc["case_files"]["cases.torch.case_b.py"] == str(s0) and doc["runs"]["cases.torch.case_c.py"] == str(s1)


def test_a_case_file_in_two_shards_stops_the_merge(tmp_path):
    s0, s1 = tmp_path / "s0", tmp_path / "s1"
    _run_dir(s0, "cases.torch.case_a.py", ["cases/torch/case_a.py"])
    _run_dir(s1, "cases.torch.case_z.py+1", ["cases/torch/case_z.py", "cases/torch/case_a.py"])
    r = _merge(tmp_path / "out", s0, s1)
    assert r.returncode == 2 and "case file cases.torch.case_a.py: in" in r.stderr
    assert not (tmp_path / "out").exists()
