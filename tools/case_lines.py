#!/usr/bin/env python3
"""Print how many lines each declared case takes to write (stdlib only).

Usage: ``python3 tools/case_lines.py [--kind TrainCase] [--layer N] FILE ...``. A case's size is
the line span of its ``register(Kind(...))`` statement plus the line spans of the module-level
functions of the same file that the declaration names (``parallelize=``, ``train_step=``,
``model=``, ``fn=`` …, also as a factory call ``parallelize=pipeline("ScheduleGPipe")``), each
counted once per case. The capability under test — what ``parallelize=``, ``train_step=`` and
``fn=`` name, also inside ``phases=(Phase(parallelize=...),)`` — is counted wherever it is
defined, also when imported from a helper module of the repository
(``cases/torch/training/plans.py``); the shared models, data, losses and optimizers
(``cases/torch/training/models.py``) are not. Prints each case and the median, the figure
seed-001 issue #12 asks for (≤ 25 lines for a single capability).
"""
from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys
from typing import Dict, List, Optional, Tuple


def _span(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def _literal_layer(call: ast.Call) -> Optional[int]:
    for kw in call.keywords:
        if kw.arg == "layer" and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


#: Keywords naming the capability under test: counted even when imported from a helper module.
CAPABILITY_KEYWORDS = ("parallelize", "train_step", "fn")


def _imported_functions(tree: ast.Module, root: str) -> Dict[str, int]:
    """Line spans of functions a ``from pkg.mod import f`` brings in from a module file under
    ``root`` (the repository: ``pkg/mod.py``)."""
    spans: Dict[str, int] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0):
            continue
        module = os.path.join(root, *stmt.module.split(".")) + ".py"
        if not os.path.exists(module):
            continue
        with open(module, encoding="utf-8") as f:
            defs = {n.name: _span(n) for n in ast.parse(f.read()).body if isinstance(n, ast.FunctionDef)}
        spans.update({a.asname or a.name: defs[a.name] for a in stmt.names if a.name in defs})
    return spans


def _names(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _capability_names(decl: ast.Call) -> set:
    """Names under the capability keywords, also inside ``phases=(Phase(parallelize=...),)``."""
    found = set()
    for node in ast.walk(decl):
        if isinstance(node, ast.keyword) and node.arg in CAPABILITY_KEYWORDS:
            found |= _names(node.value)
    return found


def case_sizes(path: str, kind: str, layer: Optional[int], root: str = ".") -> List[Tuple[str, int]]:
    """``(case name, lines)`` for each ``register(<kind>(...))`` of ``path`` (at ``layer``);
    ``root``: the repository, where imported helper modules are looked up."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    funcs: Dict[str, int] = {n.name: _span(n) for n in tree.body if isinstance(n, ast.FunctionDef)}
    imported = _imported_functions(tree, root)
    out = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "register" and call.args):
            continue
        decl = call.args[0]
        if not (isinstance(decl, ast.Call) and getattr(decl.func, "id", "") == kind):
            continue
        if layer is not None and _literal_layer(decl) != layer:
            continue
        names = {n for kw in decl.keywords for n in _names(kw.value)}
        helpers = _capability_names(decl) - set(funcs)
        name = next((kw.value.value for kw in decl.keywords if kw.arg == "name"), "?")
        out.append((name, _span(stmt) + sum(funcs.get(n, 0) for n in names) + sum(imported.get(n, 0) for n in helpers)))
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--kind", default="TrainCase")
    ap.add_argument("--layer", type=int, default=None)
    args = ap.parse_args(argv)
    sizes = [s for p in args.files for s in case_sizes(p, args.kind, args.layer)]
    for name, n in sorted(sizes, key=lambda s: s[1]):
        print(f"  {n:4d}  {name}")
    if not sizes:
        print("no case found")
        return 1
    print(f"{len(sizes)} {args.kind} case(s); median {statistics.median(n for _, n in sizes):g} lines, "
          f"max {max(n for _, n in sizes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
