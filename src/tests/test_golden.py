"""Golden loss curves: every layer-2/3 training case has one in the repository, none is stale,
and the comparison is exact for the recording build, within the loss tolerance when only the
CPU kernel path differs (no torch needed)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import meshtest
from meshtest import CompareSpec, TrainCase, TrainCompare
from meshtest.model.rules import NO_GOLDEN_NOTE
from meshtest.model.scan import scan_case_file
from meshtest.platforms.ports import TrainSnapshot
from meshtest.rank.compare import CompareError
from meshtest.rank.train import GOLDEN_LAYERS, check_golden

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
TRAINING = os.path.join(REPO, "cases", "torch", "training")
BUILD = {"torch": "2.13.0+cpu", "cpu_capability": "AVX2"}


def test_every_layer_2_and_3_training_case_has_a_golden_curve_and_none_is_stale():
    files = sorted(os.path.join(TRAINING, f) for f in os.listdir(TRAINING) if f.startswith("case_"))
    wanted = {c.name for f in files for c in scan_case_file(f).cases
              if c.kind == "train" and c.layer in GOLDEN_LAYERS}
    stored = {f[:-5] for f in os.listdir(os.path.join(TRAINING, "golden")) if f.endswith(".json")}
    assert wanted - stored == set(), "missing golden curves: run python3 tools/golden_curves.py --write"
    assert stored - wanted == set(), "golden curves of no layer-2/3 training case"
    assert len(wanted) >= 30
    for name in sorted(stored):
        with open(os.path.join(TRAINING, "golden", f"{name}.json"), encoding="utf-8") as f:
            doc = json.load(f)
        assert doc["case"] == name and ("losses" in doc) != ("no_curve" in doc), doc
        if "losses" in doc:
            assert doc["build"]["torch"] and all(isinstance(v, float) for v in doc["losses"] if v is not None), doc


def _case():
    return TrainCase(name="g", model=len, data=len, loss=lambda out, target: out, mesh_shape=(1,),
                     tags=("cpu_level0",), layer=2,
                     compare=TrainCompare(loss=CompareSpec.allclose(rtol=1e-3, atol=0.0))).validated("case_g.py")


def _run(*losses):
    return [TrainSnapshot(np.float32(v), None, {}, {}, {}) for v in losses]


def _golden(tmp_path, losses, build=BUILD):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"case": "g", "build": build, "losses": [float(np.float32(v)) for v in losses]}))
    return str(path)


def test_the_same_build_compares_exactly_and_names_the_step(tmp_path):
    path = _golden(tmp_path, [1.5, 0.75])
    notes = []
    check_golden(_case(), _run(1.5, 0.75), path, BUILD, notes)
    assert notes == ["golden curve: 2 step(s) from step 0 equal to g.json"]  # the comparison is on record
    with pytest.raises(CompareError, match=r"step 1 loss 0\.75000\d* != stored 0\.75 .*"
                                           r"tools/golden_curves.py --write cases/x/case_g.py$"):
        check_golden(_case(), _run(1.5, np.nextafter(np.float32(0.75), np.float32(1))), path, BUILD, notes,
                     source="cases/x/case_g.py")


def test_a_new_torch_release_compares_exactly_another_cpu_path_within_the_tolerance(tmp_path):
    path = _golden(tmp_path, [1.5, 0.75])
    close = _run(1.5, 0.7501)  # within rtol 1e-3, not equal
    with pytest.raises(CompareError, match="step 1 loss"):
        check_golden(_case(), close, path, {**BUILD, "torch": "2.14.0+cpu"}, [])
    notes = []
    check_golden(_case(), close, path, {**BUILD, "cpu_capability": "AVX512"}, notes)
    assert notes[0].startswith("golden curve: 2 step(s) from step 0 within the loss tolerance of (recorded with")
    with pytest.raises(CompareError, match="step 1 loss"):
        check_golden(_case(), _run(1.5, 0.8), path, {**BUILD, "cpu_capability": "AVX512"}, [])


def test_a_new_case_without_a_curve_or_a_golden_folder_is_a_note_and_a_bad_curve_fails(tmp_path):
    notes = []
    check_golden(_case(), _run(1.0), str(tmp_path / "none.json"), BUILD, notes)
    assert notes[0].startswith(NO_GOLDEN_NOTE)
    # a case directory with no golden/ yet (issue 43): the same note, not a failure at step golden;
    # a committed curve missing from a sandbox fails the summary instead (test_results_summary.py)
    notes = []
    check_golden(_case(), _run(1.0), str(tmp_path / "absent" / "g.json"), BUILD, notes)
    assert len(notes) == 1 and notes[0].startswith(NO_GOLDEN_NOTE)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CompareError, match=r"bad.json cannot be read"):
        check_golden(_case(), _run(1.0), str(tmp_path / "bad.json"), BUILD, [])
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"case": "g", "no_curve": "unsupported: missing feature(s) x"}))
    with pytest.raises(CompareError, match=r"stores no curve \(unsupported: missing feature"):
        check_golden(_case(), _run(1.0), str(path), BUILD, [])


def test_a_phase_compares_its_own_steps_of_the_whole_curve(tmp_path):
    from meshtest import Phase

    case = TrainCase(name="g", model=len, data=len, loss=lambda out, target: out, mesh_shape=(1,),
                     tags=("cpu_level0",), layer=3, steps=2,
                     phases=(Phase(steps=2),)).validated("case_g.py")
    path = _golden(tmp_path, [1.5, 1.25, 1.0, 0.75])
    check_golden(case, _run(1.5, 1.25), path, BUILD, [], start=0)
    check_golden(case, _run(1.0, 0.75), path, BUILD, [], start=2)
    with pytest.raises(CompareError, match="step 3 loss 0.5 != stored 0.75"):
        check_golden(case, _run(1.0, 0.5), path, BUILD, [], start=2)
    short = _golden(tmp_path, [1.5, 1.25])
    with pytest.raises(CompareError, match=r"stores 2 step\(s\), the case trains 4 step\(s\)"):
        check_golden(case, _run(1.5, 1.25), short, BUILD, [], start=0)
