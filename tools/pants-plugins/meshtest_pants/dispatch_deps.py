"""Dependency inference from the dispatch map: a `meshtest_case_file` depends on the rule modules
its cases dispatch into.

A case reaches an operator library's sharding rule by dispatch, not by import (the library finds
its rule modules on disk), so Python's import inference cannot see the edge. The map beside the
case files (`dispatch_map.json`, written by `python -m meshtest dispatch-map DIR`, read with
`meshtest.model.dispatch_map`) lists, per case, the module that served each operator; this rule
adds each module other than torch's as a dependency of the case file's target, resolved to its
owning target as Python's inference resolves an import. Then `--changed-since
--changed-dependents=transitive` selects exactly the case files whose cases reach a changed rule
module, the target's sandbox holds that module, and Pants' cache reruns only those targets.

A module of the map that no target owns (the map names a module that is gone) fails the
target's dependency resolution, naming the module, the map and the command that refreshes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pants.backend.python.dependency_inference.module_mapper import PythonModuleOwners, PythonModuleOwnersRequest
from pants.backend.python.target_types import PythonResolveField
from pants.engine.fs import DigestContents, PathGlobs
from pants.engine.internals.selectors import MultiGet
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import FieldSet, InferDependenciesRequest, InferredDependencies
from pants.engine.unions import UnionRule

from meshtest.model import dispatch_map
from meshtest_pants.target_types import MeshtestCaseSourceField


@dataclass(frozen=True)
class MeshtestDispatchFieldSet(FieldSet):
    required_fields = (MeshtestCaseSourceField,)

    source: MeshtestCaseSourceField
    resolve: PythonResolveField


class InferMeshtestDispatchDependencies(InferDependenciesRequest):
    infer_from = MeshtestDispatchFieldSet


class DispatchMapInferenceError(Exception):
    pass


def modules_for(map_text: str, map_path: str, case_file: str) -> list[str]:
    """The rule modules (other than torch's) the dispatch map at `map_path` lists for the cases
    of `case_file`. Raises `DispatchMapInferenceError` naming the map when it cannot be read."""
    try:
        doc = dispatch_map.parse(map_text, map_path)
    except dispatch_map.DispatchMapError as e:
        raise DispatchMapInferenceError(str(e)) from None
    return dispatch_map.rule_modules(doc, os.path.basename(case_file))


@rule(desc="Infer meshtest case files' dependencies on the rule modules they dispatch into")
async def infer_meshtest_dispatch_dependencies(request: InferMeshtestDispatchDependencies) -> InferredDependencies:
    case_file = request.field_set.source.file_path
    map_path = dispatch_map.map_path(case_file)
    contents = await Get(DigestContents, PathGlobs([map_path]))
    if not contents:
        return InferredDependencies([])
    modules = modules_for(contents[0].content.decode("utf-8"), map_path, case_file)
    resolve = request.field_set.resolve.value
    owners = await MultiGet(Get(PythonModuleOwners, PythonModuleOwnersRequest(m, resolve)) for m in modules)
    unowned = [m for m, o in zip(modules, owners) if not o.unambiguous]
    if unowned:
        refresh = dispatch_map.REFRESH.format(directory=os.path.dirname(map_path))
        raise DispatchMapInferenceError(
            f"{map_path} lists rule module(s) {', '.join(unowned)} for {case_file}, which no target owns (or more "
            f"than one does): record the map again with {refresh}")
    return InferredDependencies(sorted({a for o in owners for a in o.unambiguous}))


def rules():
    return [
        *collect_rules(),
        UnionRule(InferDependenciesRequest, InferMeshtestDispatchDependencies),
    ]
