"""Test-plan ID coverage: the manifest parser, the coverage check, and the TP suite itself
(every ID of the TP test plan listed in cases/torch/tp/seed003_ids.txt has a case, and no case
names an ID outside it)."""
from __future__ import annotations

import glob
import os

import pytest

from meshtest.model.scan import scan_case_file, scan_case_source
from meshtest.report.specids import coverage, format_coverage, read_manifest

TP_DIR = os.path.join("cases", "torch", "tp")


def _case(name, spec_id):
    return (f'register(ScenarioCase(name="{name}", fn=f, mesh_shape=(2,), tags=("cpu_level0",)'
            + (f', spec_id="{spec_id}"' if spec_id else "") + "))\n")


def test_coverage_reports_missing_and_unknown_ids(tmp_path):
    manifest = tmp_path / "ids.txt"
    manifest.write_text("# comment\nA1\tfirst\nA2\tsecond\n")
    scan = scan_case_source("f.py", _case("x", "A1") + _case("y", "A1") + _case("z", "Z9") + _case("w", None))
    assert scan.error is None
    cov = coverage(read_manifest(str(manifest)), [scan])
    assert cov.cases == {"A1": ["x", "y"], "A2": []}
    assert (cov.missing, cov.unknown, cov.ok) == (["A2"], {"z": "Z9"}, False)
    lines = format_coverage(cov)
    assert "A2     0 case(s)  second   <- MISSING" in lines
    assert lines[-1] == "1/2 IDs have cases; missing: A2; 1 case(s) name unknown IDs"


@pytest.mark.parametrize("text,why", [("A1 no tab\n", "expected 'ID<TAB>feature'"), ("A1\tx\nA1\ty\n", "listed twice")])
def test_bad_manifest_names_file_and_line(tmp_path, text, why):
    manifest = tmp_path / "ids.txt"
    manifest.write_text(text)
    with pytest.raises(ValueError) as e:
        read_manifest(str(manifest))
    assert why in str(e.value) and f"{manifest}:" in str(e.value)


def test_tp_suite_covers_every_seed_003_id():
    files = sorted(glob.glob(os.path.join(TP_DIR, "case_*.py")))
    assert files, f"no case files under {TP_DIR}"
    scans = [scan_case_file(f) for f in files]
    assert [s.error for s in scans if s.error] == []
    manifest = read_manifest(os.path.join(TP_DIR, "seed003_ids.txt"))
    assert len(manifest) == 41  # A1–A12, B1–B9, C1–C15, D1–D5
    cov = coverage(manifest, scans)
    assert cov.ok, "\n".join(format_coverage(cov))
