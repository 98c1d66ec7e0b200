"""Bad input: each kind of broken case file or declaration gives one clear message naming the
file, the case and the rule; a good file run alongside still passes (~10 s, one launch)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import meshtest
from tests.helpers import case_file

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))


def _case(name, fn="ok", inputs="[InputSpec((4, 4))]", placements="[(Shard(0),)]", mesh="(2,)", extra=""):
    return (f"register(OpShardCase(name={name!r}, fn={fn}, inputs={inputs}, placements={placements}, "
            f"mesh_shape={mesh}, tags=('cpu_level1',){extra}))\n")


HEAD = "import torch\nimport numpy as np\n\ndef ok(x):\n    return x * 2.0\n\ndef three(x):\n    return 3\n\n"

BROKEN = {  # file stem: (body, words the report must contain)
    "syntax": (HEAD + "register(OpShardCase(name='s1',\n", ["case_syntax.py", "rule syntax"]),
    "import_error": ("import not_a_module_anywhere\n" + HEAD + _case("ie1"),
                     ["case_import_error.py", "rule import", "not_a_module_anywhere", "ie1", "step load"]),
    "non_literal_mesh": (HEAD + "M = make()\n" + _case("nl1", mesh="M"),
                         ["case 'nl1'", "rule static-scan", "mesh_shape="]),
    "negative_dim": (HEAD + _case("zd1", inputs="[InputSpec((4, -1))]"), ["case 'zd1'", "rule input-shape"]),
    "negative_mesh": (HEAD + _case("nm1", mesh="(2, -2)", placements="[(Shard(0), Shard(1))]"),
                      ["case 'nm1'", "rule mesh-shape"]),
    "placement_mesh_mismatch": (HEAD + _case("pm1", mesh="(2, 1)"), ["case 'pm1'", "rule placement-arity"]),
    "unknown_placement": (HEAD + _case("up1", placements="[('S0',)]"), ["case 'up1'", "rule placement-kind"]),
    "unknown_gate": (HEAD + _case("ug1").replace("'cpu_level1'", "'gpu_level0'"), ["case 'ug1'", "rule gate-tag"]),
    "duplicate_across_files": (HEAD + _case("good1"), ["case 'good1'", "rule duplicate-name", "case_good.py"]),
    "wrong_data_shape": (HEAD + _case("wd1", inputs="[InputSpec((4, 4), data=np.zeros((3, 4)))]"),
                         ["case 'wd1'", "rule input-data", "(3, 4)"]),
    "compare_outputs_range": (HEAD + _case("co1", extra=", compare_outputs=(0, 3)"),
                              ["co1", "step gather", "compare_outputs (0, 3) out of range"]),
    "non_tensor_output": (HEAD + _case("nt1", fn="three"), ["nt1", "step reference", "returned int, not a tensor"]),
}


def test_each_kind_of_bad_input_is_named_and_the_good_file_still_passes(tmp_path):
    good = case_file(tmp_path, "case_good.py", HEAD + _case("good1"))
    paths = [good] + [case_file(tmp_path, f"case_{stem}.py", body) for stem, (body, _) in BROKEN.items()]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", *paths, "--artifacts-dir", str(out),
                           "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=300)
    assert proc.returncode == 1
    outcomes = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [o["status"] for o in outcomes if o["case"] == "good1"] == ["pass"]
    for stem, (_, words) in BROKEN.items():
        mine = [o for o in outcomes if o["file"].endswith(f"case_{stem}.py")]
        assert len(mine) == 1 and mine[0]["status"] == "error", (stem, mine)
        text = mine[0]["case"] + " " + " ".join(f"step {f['step']} {f['error']}" for f in mine[0]["failures"])
        assert f"case_{stem}.py" in mine[0]["file"]
        for w in words:
            assert w in text, (stem, w, text[:500])
    assert f"{len(BROKEN)} failed" in proc.stdout.splitlines()[-2]


def test_need_above_the_pool_and_a_filter_matching_nothing_fail_fast(tmp_path):
    big = case_file(tmp_path, "case_big.py", HEAD + _case("big1", mesh="(8,)"))
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", big, "--slots", "4", "--target", "cases/torch/case_big.py",
                           "--slot-dir", str(tmp_path / "slots"), "--artifacts-dir", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert "cases/torch/case_big.py needs 8 device slot(s) but the pool has 4" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "meshtest", big, "--case", "nothing*", "--artifacts-dir",
                           str(tmp_path / "o2")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "case filter ['nothing*'] matches no selected case" in proc.stderr
