"""The dispatch map: per case, the operators it dispatched and the module that served each one's
sharding — recorded by a run, committed beside the case files, read by the ranks (a stale map
fails the case) and by the Pants plugin (a case file depends on the rule modules its cases
reach, so ``--changed-since`` selects exactly the files that dispatch into a changed rule).

A case reaches a sharding rule by dispatch, not by import: a case file imports an operator
library, and which of the library's rule modules serve its cases is known only by running them.
The platform answers which module served an operator (torch:
:meth:`meshtest.platforms.torch.rules.serving_module`: the ``register_sharding`` function's
module, or ``torch`` for torch's own strategies and decompositions, ``none`` where no rule
served it).

File ``dispatch_map.json`` in a case directory::

    {"format": 1, "written_by": "python -m meshtest dispatch-map cases/torch/shardops",
     "libraries": ["shardops"],
     "cases": {"case_row_scale.py::row_scale_s0": {"aten.mul.Tensor": "torch",
                                                   "shardops.row_scale.default": "shardops.sharding.row_scale"}}}

``libraries``: the operator namespaces whose every dispatch must be served by a listed module
(an operator of one served by no rule fails the case: its module is missing or the map is
stale). Stdlib only (the Pants plugin reads it under CPython 3.9).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional

#: The map's file name, in the directory of the case files it covers.
FILE = "dispatch_map.json"
#: The format this code reads and writes.
FORMAT = 1
#: The module of every strategy, rule and decomposition torch itself provides.
TORCH = "torch"
#: No sharding rule served the operator (DTensor raised, or fell back to a decomposition that failed).
NONE = "none"
#: The command that records the map of a case directory anew.
REFRESH = "python -m meshtest dispatch-map {directory}"


class DispatchMapError(ValueError):
    """A dispatch map that cannot be read: names the file and what is wrong."""


def map_path(case_file: str) -> str:
    """Where the map covering ``case_file`` lies (beside it), whether or not it exists."""
    return os.path.join(os.path.dirname(case_file), FILE)


def case_key(case_file: str, case: str) -> str:
    """The map's key of a case: ``<file name>::<case name>`` (the file relative to the map)."""
    return f"{os.path.basename(case_file)}::{case}"


def parse(text: str, path: str) -> Dict[str, Any]:
    """The map in ``text`` (read from ``path``), checked: format, ``libraries`` (names),
    ``cases`` (key → {operator: module}).

    :raises DispatchMapError: naming ``path`` and the first thing wrong."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        refresh = REFRESH.format(directory=os.path.dirname(path) or ".")
        raise DispatchMapError(f"{path}: not JSON ({e}); record it again with {refresh}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DispatchMapError(f"{path}: format must be {FORMAT}")
    libraries, cases = doc.get("libraries"), doc.get("cases")
    if not isinstance(libraries, list) or not all(isinstance(x, str) and x for x in libraries):
        raise DispatchMapError(f"{path}: libraries must be a list of operator namespaces")
    if not isinstance(cases, dict):
        raise DispatchMapError(f"{path}: cases must map '<file>::<case>' to {{operator: module}}")
    for key, served in cases.items():
        if "::" not in key or not isinstance(served, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in served.items()):
            raise DispatchMapError(f"{path}: cases[{key!r}] must be '<file>::<case>' → {{operator: module}}")
    return doc


def read(path: str) -> Dict[str, Any]:
    """The map at ``path``. :raises DispatchMapError: unreadable or malformed (naming it)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise DispatchMapError(f"{path}: {e.strerror}") from None
    return parse(text, path)


def rule_modules(doc: Mapping[str, Any], case_file_name: str) -> List[str]:
    """The modules other than torch's that served the cases of the file ``case_file_name``
    (its base name), sorted: what the file's target depends on."""
    prefix = f"{case_file_name}::"
    return sorted({m for key, served in doc["cases"].items() if key.startswith(prefix)
                   for m in served.values() if m not in (TORCH, NONE)})


def check(doc: Mapping[str, Any], path: str, case_file: str, case: str, served: Mapping[str, str]) -> Optional[str]:
    """Why what ``case`` dispatched this run (``served``: operator → module) is not what the map
    at ``path`` lists for it, or ``None``: every module other than torch's that served one of its
    operators is listed for the case, and every operator of the map's ``libraries`` was served by
    a rule. A listed module the case no longer reaches is not an error (the file still depends on
    it: more is rerun, nothing is missed)."""
    key = case_key(case_file, case)
    refresh = REFRESH.format(directory=os.path.dirname(path) or ".")
    listed = doc["cases"].get(key)
    if listed is None:
        return f"the dispatch map {path} has no entry for {key}: record it with {refresh}"
    modules = set(listed.values())
    for op, module in sorted(served.items()):
        if module not in (TORCH, NONE) and module not in modules:
            return (f"{key} dispatched {op} into rule module {module}, which the dispatch map {path} does not list "
                    f"for it (its target does not depend on that module, so a change to it would not rerun this "
                    f"case): record the map again with {refresh}")
        if module == NONE and any(op.startswith(f"{lib}.") for lib in doc["libraries"]):
            return (f"{key} dispatched {op}, an operator of {op.split('.')[0]}, and no sharding rule served it here: "
                    f"its rule module is missing from this run, or the dispatch map {path} lists none for the case "
                    f"(map: {listed.get(op, 'no entry for the operator')}); record the map again with {refresh}")
    return None


def build(records: Iterable[Mapping[str, Any]], libraries: Iterable[str], directory: str) -> Dict[str, Any]:
    """A map from recorded dispatches (``{"file", "case", "served"}`` each; several ranks' records
    of one case merge), for the case files in ``directory``."""
    cases: Dict[str, Dict[str, str]] = {}
    for rec in records:
        if os.path.normpath(os.path.dirname(rec["file"])) != os.path.normpath(directory):
            continue
        cases.setdefault(case_key(rec["file"], rec["case"]), {}).update(rec["served"])
    return {"format": FORMAT, "written_by": REFRESH.format(directory=directory), "libraries": sorted(set(libraries)),
            "cases": {k: dict(sorted(v.items())) for k, v in sorted(cases.items())}}


def text(doc: Mapping[str, Any]) -> str:
    """The map as committed: one case per line, sorted."""
    lines = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(doc["cases"].items())]
    head = {k: doc[k] for k in ("format", "written_by", "libraries")}
    return (json.dumps(head, sort_keys=False)[:-1] + ', "cases": {\n' + ",\n".join(lines) + "\n}}\n")


def module_of(path: str, roots: Iterable[str] = ("src",)) -> Optional[str]:
    """The dotted module a repository path holds under one of the source ``roots``
    (``src/shardops/sharding/col_sum.py`` → ``shardops.sharding.col_sum``), or ``None``."""
    norm = path.replace(os.sep, "/")
    for root in roots:
        prefix = root.rstrip("/") + "/"
        if norm.startswith(prefix) and norm.endswith(".py"):
            parts = norm[len(prefix):-3].split("/")
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return None


def affected_cases(maps: Mapping[str, Mapping[str, Any]], changed: Iterable[str]) -> Optional[List[str]]:
    """The case names whose map entries list a module of ``changed`` (repository paths), sorted;
    ``None`` when some changed path is not a rule module any map lists (then the change must be
    judged at file granularity: a case file, the library's operators, meshtest itself...).
    ``maps``: map path → map."""
    listed = {m for doc in maps.values() for served in doc["cases"].values() for m in served.values()}
    modules = []
    for path in changed:
        module = module_of(path)
        if module is None or module not in listed:
            return None
        modules.append(module)
    return sorted({key.split("::", 1)[1] for doc in maps.values() for key, served in doc["cases"].items()
                   if set(served.values()) & set(modules)})
