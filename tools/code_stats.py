#!/usr/bin/env python3
"""Print the longest functions and the module sizes of a source tree (stdlib only).

Usage: ``python3 tools/code_stats.py [ROOT ...]`` (default: ``src/meshtest``). A function's
length is its line span (``end_lineno - lineno + 1``, decorators excluded), nested functions
counted on their own as well. Module size is its number of lines. Used for the before/after
figures of layout changes.
"""
from __future__ import annotations

import ast
import os
import sys
from typing import List, Tuple


def _python_files(roots: List[str]) -> List[str]:
    out = []
    for root in roots:
        if os.path.isfile(root):
            out.append(root)
            continue
        for d, _, names in os.walk(root):
            out.extend(os.path.join(d, n) for n in names if n.endswith(".py"))
    return sorted(out)


def functions(path: str) -> List[Tuple[int, str]]:
    """``(lines, "path:qualified name")`` for every function and method of ``path``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    found: List[Tuple[int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((child.end_lineno - child.lineno + 1, f"{path}:{prefix}{child.name}"))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def main(argv: List[str]) -> int:
    roots = argv[1:] or ["src/meshtest"]
    files = _python_files(roots)
    funcs = sorted((f for p in files for f in functions(p)), reverse=True)
    print("longest functions (lines):")
    for n, name in funcs[:10]:
        print(f"  {n:4d}  {name}")
    sizes = []
    for p in files:
        with open(p, encoding="utf-8") as f:
            sizes.append((sum(1 for _ in f), p))
    print(f"modules ({len(sizes)}, {sum(n for n, _ in sizes)} lines; largest first):")
    for n, p in sorted(sizes, reverse=True):
        print(f"  {n:4d}  {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
