"""meshtest.strength.figures: the figures of a mutate or coverage-ops run as an artifact, and the
pages that quote them. Expected counts are counted by hand from the fixtures below; the page
check runs on the committed docs/strength.md and docs/figures (a figure edited by hand fails)."""
from __future__ import annotations

import json
import os
import shutil

import meshtest
from meshtest.strength import figures
from meshtest.strength.coverage import FamilyCoverage
from meshtest.strength.mutate import MutantResult

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))


def _mutant(op, fault, state, evidence=""):
    m = MutantResult(f"{op}:{fault}", op, fault)
    m.state, m.evidence = state, evidence
    return m


def _mutation():
    results = [_mutant("aten.sum.default", "reduce_skipped", "killed"),
               _mutant("aten.sum.default", "reduce_op_swapped", "survived"),
               _mutant("aten.mm.default", "reduce_skipped", "killed"),
               _mutant("aten.mm.default", "reduce_op_swapped", "no_cases"),
               _mutant("aten.add.Tensor", "reduce_skipped", "unproven",
                       "aten.add.Tensor#0: equal to the reference with the mutant on (an equivalent mutant on this "
                       "input); aten.add.Tensor#1: the mutant changed no propagated call"),
               _mutant("aten.div.Tensor", "reduce_skipped", "unproven",
                       "aten.div.Tensor#0: the reference raises on drawn inputs (ZeroDivisionError: x)")]
    by_fault = {"reduce_skipped": {"generated": (2, 2), "hand-written": (1, 2)},
                "reduce_op_swapped": {"generated": (0, 2)}}
    return figures.mutation_figures(results, {"cpu_local": (2, 4)}, by_fault, how="python -m meshtest mutate x",
                                    wall_s=12.4, build={"torch": "9.9"}, selected=30, run_under=7, left_out=3,
                                    date="2026-12-08")


def test_a_mutation_run_is_counted_by_state_reason_gate_and_fault():
    fig = _mutation()
    assert (fig["mutants"], fig["operators"], fig["faults"]) == (6, 4, ["reduce_op_swapped", "reduce_skipped"])
    assert fig["states"] == {"killed": 2, "no_cases": 1, "survived": 1, "unproven": 2}
    # the first tried call's reason counts
    assert fig["unproven_by_reason"] == {"equivalent on the tried inputs": 1,
                                         "the reference rejects the drawn inputs": 1}
    assert fig["survivors"] == ["aten.mm.default:reduce_op_swapped", "aten.sum.default:reduce_op_swapped"]
    assert fig["cases"] == {"selected": 30, "run_under_mutants": 7, "left_out_need_real_ranks": 3}
    assert fig["wall_s"] == 12
    text = figures.render(fig)
    assert "6 mutants over 4 operators and 2 faults: 4 proven, 2 of them killed, 1 survived, 1 with no passing " \
           "case; 2 unproven (equivalent on the tried inputs 1; the reference rejects the drawn inputs 1)." in text
    assert "| `cpu_local` | 2/4 = 50.0 % |" in text
    assert "| fault | generated | hand-written |" in text
    assert "| `reduce_op_swapped` | 0/2 | – |" in text and "| `reduce_skipped` | 2/2 | 1/2 |" in text
    assert "(3 selected cases need real ranks and were left out)" in text
    assert text.endswith("Survivors (2): `aten.mm.default:reduce_op_swapped`, `aten.sum.default:reduce_op_swapped`.")


def test_a_coverage_run_is_counted_by_family_and_reason():
    fams = [FamilyCoverage("pointwise", ["a", "b", "c"], ["a"]), FamilyCoverage("view", ["v"], ["v"]),
            FamilyCoverage("(no rule)", ["x"], ["x"])]
    fig = figures.coverage_figures(fams, {"b": {}}, {"an out= overload": 1, "nothing": 0}, how="cov",
                                   build={"torch": "9.9"}, cases=10, exercising=8, dispatched=4, date="2026-12-08")
    assert (fig["registered"], fig["exercised"]) == (4, 2)  # (no rule) is not a registered family
    assert fig["not_exercised"] == {"an out= overload": 1, "every case that reaches it fails": 1}
    text = figures.render(fig)
    assert "**2 of 4 registered operators exercised** (50.0 %), 4 operators dispatched." in text
    assert "| pointwise | 3 | 1 |" in text and "(no rule)" not in text


def _site(tmp_path, body):
    """A repo root with docs/strength.md holding ``body`` and docs/figures/m.json the fixture."""
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    figures.write(str(tmp_path / "docs" / "figures" / "m.json"), _mutation())
    (tmp_path / "docs" / "strength.md").write_text(body)
    return tmp_path


def test_the_command_fills_a_block_and_the_check_names_a_hand_edit(tmp_path, capsys):
    root = _site(tmp_path, "intro\n<!-- figures: m -->\nold text\n<!-- /figures -->\nend\n")
    assert figures.cmd_figures(only_check=True, root=str(root)) == 1
    assert "the block 'figures: m' differs from docs/figures/m.json" in capsys.readouterr().err
    assert figures.cmd_figures(root=str(root)) == 0
    page = (root / "docs" / "strength.md").read_text()
    assert page.startswith("intro\n<!-- figures: m -->\nMade by `python -m meshtest mutate x` on 2026-12-08")
    assert page.endswith("\n<!-- /figures -->\nend\n")
    assert figures.cmd_figures(only_check=True, root=str(root)) == 0
    # canary: one figure edited by hand
    (root / "docs" / "strength.md").write_text(page.replace("2/4 = 50.0 %", "3/4 = 75.0 %"))
    assert figures.cmd_figures(only_check=True, root=str(root)) == 1
    assert "figures: m' differs" in capsys.readouterr().err


def test_a_file_no_page_quotes_and_a_block_without_its_file_are_named(tmp_path, capsys):
    root = _site(tmp_path, "<!-- figures: gone -->\nx\n<!-- /figures -->\n")
    assert figures.cmd_figures(only_check=True, root=str(root)) == 1
    err = capsys.readouterr().err
    assert "docs/figures/gone.json" in err and "docs/figures/m.json: no page quotes it" in err


def test_add_copies_an_artifact_and_refuses_one_that_is_not_figures(tmp_path, capsys):
    root = _site(tmp_path, "<!-- figures: m -->\nx\n<!-- /figures -->\n<!-- figures: n -->\nx\n<!-- /figures -->\n")
    art = tmp_path / "run" / "figures.json"
    art.parent.mkdir()
    shutil.copyfile(root / "docs" / "figures" / "m.json", art)
    assert figures.cmd_figures(add=[(str(art), "n")], root=str(root)) == 0
    assert json.loads((root / "docs" / "figures" / "n.json").read_text())["kind"] == "mutation"
    assert figures.cmd_figures(only_check=True, root=str(root)) == 0
    kept = (root / "docs" / "figures" / "n.json").read_text()
    art.write_text('{"cases": 1}')
    assert figures.cmd_figures(add=[(str(art), "n")], root=str(root)) == 2
    assert "a figures file has 'kind' and 'made_by'" in capsys.readouterr().err
    # a file with kind and made_by that cannot be rendered is refused before anything is copied
    art.write_text('{"kind": "mutation", "made_by": "x"}')
    assert figures.cmd_figures(add=[(str(art), "n")], root=str(root)) == 2
    assert "without the field" in capsys.readouterr().err
    assert (root / "docs" / "figures" / "n.json").read_text() == kept
    for bad in ("../escaped", "sub/x", "a b"):
        assert figures.cmd_figures(add=[(str(root / "docs" / "figures" / "m.json"), bad)], root=str(root)) == 2
        assert "letters, digits" in capsys.readouterr().err
    assert not (root / "docs" / "escaped.json").exists() and not (root / "docs" / "figures" / "a b.json").exists()
    assert figures.cmd_figures(add=[(str(art), "n")], only_check=True, root=str(root)) == 2
    assert figures.cmd_figures(add=[(str(tmp_path / "missing.json"), "n")], root=str(root)) == 2
    assert "not a readable figures file" in capsys.readouterr().err


def test_a_block_without_its_end_marker_rewrites_nothing(tmp_path, capsys):
    page = "<!-- figures: m -->\nold\n\nprose that must stay\n<!-- figures: m -->\nx\n<!-- /figures -->\n"
    root = _site(tmp_path, page)
    assert figures.cmd_figures(root=str(root)) == 2
    assert "have no <!-- /figures --> line" in capsys.readouterr().err
    assert (root / "docs" / "strength.md").read_text() == page
    assert figures.cmd_figures(only_check=True, root=str(root)) == 2
    assert any("have no <!-- /figures --> line" in p for p in figures.check(str(root)))


def test_outside_the_repository_the_command_says_where_to_run_it(tmp_path, capsys):
    assert figures.cmd_figures(only_check=True, root=str(tmp_path)) == 2
    assert "run from the repository root" in capsys.readouterr().err
    assert figures.cmd_figures(add=[(str(tmp_path / "x.json"), "x")], root=str(tmp_path)) == 2
    assert not (tmp_path / "docs").exists()


def test_docs_strength_quotes_its_figures_files_word_for_word():
    """The committed page against the committed artifacts: a figure edited by hand, a file
    replaced without rewriting the page, or a block without its file fails here."""
    assert figures.check(REPO) == []
    with open(os.path.join(REPO, "docs", "strength.md"), encoding="utf-8") as f:
        assert figures.BLOCK.search(f.read()), "docs/strength.md quotes no figures file"
