"""Expand a `meshtest_cases` generator into one `meshtest_case_file` target per case file.

The static scan (`meshtest.model.scan`, the same code the runtime loader checks against) supplies each
file's `device_need` and its extra tags. A file that fails the scan still gets a target, with
`parse_error` set, so only that file's test fails.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pants.engine.fs import DigestContents, PathGlobs
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import (
    Dependencies,
    GeneratedTargets,
    GenerateTargetsRequest,
    SourcesPaths,
    SourcesPathsRequest,
    Tags,
)
from pants.engine.unions import UnionMembership, UnionRule
from pants.util.logging import LogLevel

from meshtest.model.rules import GATE_TAGS
from meshtest.model.scan import scan_case_source
from meshtest.parent.planner import plan_groups
from meshtest_pants.subsystem import MeshtestSubsystem
from meshtest_pants.target_types import (
    MeshtestCaseFileTarget,
    MeshtestCasesGeneratorTarget,
    MeshtestCaseSourceField,
    MeshtestCasesSourcesField,
    MeshtestDeviceNeedField,
    MeshtestLaunchGroupsField,
    MeshtestParseErrorField,
)


class GenerateMeshtestCaseTargetsRequest(GenerateTargetsRequest):
    generate_from = MeshtestCasesGeneratorTarget


@dataclass(frozen=True)
class ScannedCaseFile:
    """What the generator needs from the static scan of one case file."""

    relpath: str  # relative to the BUILD file
    error: str | None  # set when the scan failed; then `tags` is BROKEN_FILE_TAGS, `device_need` None
    tags: tuple[str, ...]
    device_need: int | None
    launch_groups: tuple[str, ...] = ()


#: Tags of a file whose scan failed: every gate, so that any gate's run (`--tag=cpu_level0`)
#: selects it and it fails loudly instead of dropping out of the selection, plus a marker to
#: find such files (`./pants --tag=meshtest:parse_error list ::`).
BROKEN_FILE_TAGS = (*GATE_TAGS, "meshtest:parse_error")


def merge_tags(generator_tags: Iterable[str] | None, scanned_tags: Iterable[str]) -> tuple[str, ...]:
    """Union of the tags written on the generator and those the scan found, sorted."""
    return tuple(sorted(set(generator_tags or ()) | set(scanned_tags)))


def case_file_field_values(
    template: Mapping[str, Any],
    case_file: ScannedCaseFile,
    runner_dependencies: Iterable[str],
) -> dict[str, Any]:
    """Field values of the `meshtest_case_file` target generated for `case_file`."""
    return {
        **template,
        MeshtestCaseSourceField.alias: case_file.relpath,
        Tags.alias: merge_tags(template.get(Tags.alias), case_file.tags),
        MeshtestDeviceNeedField.alias: case_file.device_need,
        MeshtestLaunchGroupsField.alias: case_file.launch_groups,
        MeshtestParseErrorField.alias: case_file.error,
        Dependencies.alias: (
            *(template.get(Dependencies.alias) or ()),
            *runner_dependencies,
        ),
    }


def runner_dependencies_for(resolve: str | None, default: Iterable[str],
                            by_resolve: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """The runner addresses a case file in `resolve` (`None`: the default resolve) depends on."""
    return tuple(by_resolve.get(resolve, default) if resolve else default)


def scan_case_files(spec_path: str, contents: DigestContents,
                    data: DigestContents | None = None, node_slots: int = 8) -> tuple[ScannedCaseFile, ...]:
    """Run the static scan over each file; undecodable bytes become a scan error. ``data``: the
    JSON files beside the case files, for the manifests of generated cases
    (``register_generated(manifest=...)``, meshtest.model.generated). ``node_slots``: the slots
    of one node (`[meshtest].slots`), for the `nodes:<n>` tag of a file whose largest mesh needs
    more than one node."""
    files = {fc.path: fc.content for fc in (data or ())}

    def read(path: str) -> str:
        return files[os.path.normpath(path)].decode("utf-8")

    scanned = []
    for file_content in contents:
        relpath = os.path.relpath(file_content.path, spec_path or ".")
        try:
            source = file_content.content.decode("utf-8")
        except UnicodeDecodeError as e:
            scanned.append(
                ScannedCaseFile(relpath, f"{file_content.path}: not UTF-8 text ({e})", BROKEN_FILE_TAGS, None)
            )
            continue
        scan = scan_case_source(file_content.path, source, read)
        if scan.error is not None:
            scanned.append(ScannedCaseFile(relpath, scan.error, BROKEN_FILE_TAGS, None))
        else:
            groups = tuple(g.group_id for g in plan_groups(scan.cases))
            scanned.append(
                ScannedCaseFile(relpath, None, tuple(scan.target_tags(node_slots)), scan.device_need, groups)
            )
    return tuple(scanned)


@rule(desc="Generate `meshtest_case_file` targets", level=LogLevel.DEBUG)
async def generate_meshtest_case_targets(
    request: GenerateMeshtestCaseTargetsRequest,
    meshtest: MeshtestSubsystem,
    union_membership: UnionMembership,
) -> GeneratedTargets:
    generator = request.generator
    paths = await Get(SourcesPaths, SourcesPathsRequest(generator[MeshtestCasesSourcesField]))
    contents = await Get(DigestContents, PathGlobs(paths.files))
    data = await Get(DigestContents, PathGlobs([os.path.join(request.template_address.spec_path, "*.json")]))
    case_files = scan_case_files(request.template_address.spec_path, contents, data, meshtest.slots)
    return GeneratedTargets(
        generator,
        (
            MeshtestCaseFileTarget(
                case_file_field_values(request.template, case_file, runner_dependencies_for(
                    request.template.get("resolve"), meshtest.runner_dependencies,
                    meshtest.runner_dependencies_by_resolve)),
                request.template_address.create_file(case_file.relpath),
                union_membership,
            )
            for case_file in case_files
        ),
    )


def rules():
    return [
        *collect_rules(),
        UnionRule(GenerateTargetsRequest, GenerateMeshtestCaseTargetsRequest),
    ]
