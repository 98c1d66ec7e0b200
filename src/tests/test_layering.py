"""The layout's import rules (docs/architecture.md), read from every module's syntax tree: the
model imports no side, the two sides do not import each other, reports import no side, the
port imports no adapter, and only the CLI imports suite strength."""
from __future__ import annotations

import ast
import os
from typing import Dict, Set

import meshtest

PKG = os.path.dirname(os.path.abspath(meshtest.__file__))

#: subpackage (or top-level module) → meshtest parts it must not import
FORBIDDEN = {
    "model": {"parent", "rank", "report", "platforms", "contract", "cli", "strength"},
    "contract": {"parent", "rank", "report", "platforms", "cli", "strength"},
    "status": {"model", "parent", "rank", "report", "platforms", "contract", "cli", "strength"},
    "rank": {"parent", "report", "cli", "strength"},
    "parent": {"rank", "cli", "strength"},
    "report": {"parent", "rank", "platforms", "cli", "strength"},
    "platforms": {"parent", "rank", "report", "cli", "strength"},
    # suite strength drives both sides like a command does; only the CLI uses it
    "strength": {"cli"},
}


def _part(module: str) -> str:
    """``meshtest.parent.launch`` → ``parent``; ``meshtest.status`` → ``status``."""
    return module.split(".")[1] if module.count(".") >= 1 else ""


def _imports(pkg: str = PKG) -> Dict[str, Set[str]]:
    """meshtest module → the meshtest modules it imports (relative imports resolved)."""
    found: Dict[str, Set[str]] = {}
    for d, _, names in os.walk(pkg):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, os.path.dirname(pkg))[:-3].replace(os.sep, ".")
            module = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
            package = module if name == "__init__.py" else module.rsplit(".", 1)[0]
            targets = set()
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package.split(".")
                        base = base[: len(base) - (node.level - 1)]
                        mod = ".".join(base + ([node.module] if node.module else []))
                    else:
                        mod = node.module or ""
                    targets.update(f"{mod}.{a.name}" if not node.module and node.level else mod for a in node.names)
                elif isinstance(node, ast.Import):
                    targets.update(a.name for a in node.names)
            found[module] = {t for t in targets if t.startswith("meshtest.")}
    return found


def _broken(imports: Dict[str, Set[str]]) -> list:
    return sorted(f"{mod} imports {target}" for mod, targets in imports.items() for target in targets
                  if _part(target) in FORBIDDEN.get(_part(mod), ()))


def test_import_rules_of_the_layout():
    imports = _imports()
    assert "meshtest.parent.runner" in imports and "meshtest.rank.entry" in imports
    assert "meshtest.rank.pipeline" in imports["meshtest.rank.entry"]  # `from . import pipeline` resolved
    assert not _broken(imports), _broken(imports)


def test_the_port_imports_no_adapter():
    port = {"meshtest.platforms.backend", "meshtest.platforms.ports", "meshtest.platforms.registry"}
    imports = _imports()
    assert not {(m, t) for m in port for t in imports[m] if t.startswith("meshtest.platforms.") and t not in port}


def test_the_rule_checker_sees_a_violation(tmp_path):
    pkg = tmp_path / "meshtest"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "__init__.py").write_text("")
    (pkg / "model" / "spec.py").write_text("from ..parent import launch\nfrom . import rules\n")
    assert _broken(_imports(str(pkg))) == ["meshtest.model.spec imports meshtest.parent"]


def _cycles(imports: Dict[str, Set[str]]) -> list:
    """The import circles among ``imports``' modules (Tarjan's strongly connected components of
    more than one module; an import of the module's own package does not count: a package's
    ``__init__`` re-exports its modules), each as its sorted module names."""
    graph = {m: {t for t in ts if t in imports and not m.startswith(t + ".")} for m, ts in imports.items()}
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: list = []
    on: Set[str] = set()
    found: list = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circles_even_through_imports_inside_functions():
    assert _cycles(_imports()) == []


def test_the_circle_checker_sees_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "meshtest"
    (pkg / "rank").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rank" / "__init__.py").write_text("")
    (pkg / "rank" / "pipeline.py").write_text("def run():\n    from .train import run_train\n")
    (pkg / "rank" / "train.py").write_text("from .pipeline import run\nfrom meshtest import rank\n")
    assert _cycles(_imports(str(pkg))) == [["meshtest.rank.pipeline", "meshtest.rank.train"]]
