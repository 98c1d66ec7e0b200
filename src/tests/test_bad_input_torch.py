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
    "duplicate_in_one_file": (HEAD + _case("dup1") + _case("dup1", mesh="(4,)"),
                              ["case 'dup1'", "rule duplicate-name", "declared at line 11 and again at line 12"]),
    "wrong_data_shape": (HEAD + _case("wd1", inputs="[InputSpec((4, 4), data=np.zeros((3, 4)))]"),
                         ["case 'wd1'", "rule input-data", "(3, 4)"]),
    "compare_outputs_range": (HEAD + _case("co1", extra=", compare_outputs=(0, 3)"),
                              ["co1", "step run", "compare_outputs (0, 3) out of range"]),
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
        mine = [o for o in outcomes if o["file"].endswith(f"case_{stem}.py") and o["status"] != "pass"]
        assert len(mine) == 1 and mine[0]["status"] == "error", (stem, mine)
        text = mine[0]["case"] + " " + " ".join(f"step {f['step']} {f['error']}" for f in mine[0]["failures"])
        assert f"case_{stem}.py" in mine[0]["file"]
        for w in words:
            assert w in text, (stem, w, text[:500])
    assert f"{len(BROKEN)} failed" in proc.stdout.splitlines()[-2]


def _run(tmp_path, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "meshtest", *args, "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=timeout)


def _results(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_one_bad_case_is_one_bad_case_and_the_files_valid_cases_run_and_count(tmp_path):
    mixed = case_file(tmp_path, "case_mixed.py", HEAD + "def make():\n    raise RuntimeError('helper failed')\n\n"
                      + _case("m_ok1")
                      + _case("m_typo", extra=", tolernace=1")                       # a field the constructor lacks
                      + _case("m_count", inputs="[InputSpec((4, 4)), InputSpec((4, 4))]")  # placement count
                      + _case("m_gate").replace("'cpu_level1'", "'gpu_level0'")     # unknown gate
                      + _case("m_helper", inputs="make()")                          # raises on import only
                      + _case("m_ok2", mesh="(4,)", placements="[(Shard(1),)]"))
    out = tmp_path / "out"
    proc = _run(tmp_path, mixed, "--artifacts-dir", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = {o["case"]: o for o in _results(out)}
    assert {k: v["status"] for k, v in got.items()} == {
        "m_ok1": "pass", "m_ok2": "pass", "m_typo": "error", "m_count": "error", "m_gate": "error",
        "m_helper": "error"}
    for case, step, words in (("m_typo", "scan", "rule unknown-field"), ("m_count", "scan", "rule placement-count"),
                              ("m_gate", "scan", "rule gate-tag"), ("m_helper", "register", "helper failed")):
        f = got[case]["failures"][0]  # a scan error is the case's; a registration error every rank's
        assert f["step"] == step and words in f["error"] and "case_mixed.py" in f["error"], (case, f)
    assert proc.stdout.splitlines()[-2] == "meshtest: 2 passed, 4 failed"


def test_a_name_is_unique_per_file_two_files_may_share_it(tmp_path):
    a = case_file(tmp_path, "case_a.py", HEAD + _case("same"))
    b = case_file(tmp_path, "case_b.py", HEAD + _case("same", fn="three"))
    out = tmp_path / "out"
    proc = _run(tmp_path, a, b, "--artifacts-dir", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = {(os.path.basename(o["file"]), o["case"]): o["status"] for o in _results(out)}
    assert got == {("case_a.py", "same"): "pass", ("case_b.py", "same"): "error"}  # each its own verdict


def test_a_case_above_the_pool_is_unsupported_naming_the_nodes_it_needs_and_the_run_goes_on(tmp_path):
    big = case_file(tmp_path, "case_big.py", HEAD + _case("big1", mesh="(8,)") + _case("small1"))
    out = tmp_path / "o"
    proc = _run(tmp_path, big, "--slots", "4", "--target", "cases/torch/case_big.py", "--artifacts-dir", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {o["case"]: o for o in _results(out)}
    assert (got["big1"]["status"], got["small1"]["status"]) == ("unsupported", "pass")  # counted, never skipped
    (f,) = got["big1"]["failures"]
    assert f["step"] == "slots" and "unsupported: needs 2 nodes of 4 slots (8 ranks, mesh (8,))" in f["error"]
    assert "meshtest: 1 passed, 1 unsupported, 0 failed" in proc.stdout
    assert "big1" in (out / "junit.xml").read_text()


def test_a_filter_matching_nothing_fails_fast(tmp_path):
    big = case_file(tmp_path, "case_big.py", HEAD + _case("big1", mesh="(8,)"))
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", big, "--case", "nothing*", "--artifacts-dir",
                           str(tmp_path / "o2")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "case filter ['nothing*'] matches no selected case" in proc.stderr
