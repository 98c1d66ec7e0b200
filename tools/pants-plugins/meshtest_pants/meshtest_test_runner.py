"""`./pants test` for `meshtest_case_file` targets: one `python -m meshtest run` per case file."""

from __future__ import annotations

from dataclasses import dataclass

from pants.backend.python.target_types import PythonResolveField
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import Pex, PexRequest, VenvPex, VenvPexProcess
from pants.backend.python.util_rules.pex_from_targets import (
    InterpreterConstraintsRequest,
    RequirementsPexRequest,
)
from pants.backend.python.util_rules.python_sources import (
    PythonSourceFiles,
    PythonSourceFilesRequest,
)
from pants.core.goals.test import (
    TestExtraEnv,
    TestFieldSet,
    TestRequest,
    TestResult,
    TestSubsystem,
)
from pants.core.util_rules.partitions import Partition, PartitionerType, Partitions
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.core.util_rules.system_binaries import BashBinary
from pants.engine.fs import (
    CreateDigest,
    Digest,
    DigestSubset,
    Directory,
    MergeDigests,
    PathGlobs,
    RemovePrefix,
    Snapshot,
)
from pants.engine.process import FallibleProcessResult, Process, ProcessCacheScope
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import TransitiveTargets, TransitiveTargetsRequest
from pants.option.global_options import GlobalOptions
from pants.util.logging import LogLevel

from meshtest.model.rules import lane_of
from meshtest_pants.runner_command import (
    ARTIFACTS_DIR,
    LASTFAILED_CACHE_NAME,
    LASTFAILED_DIR,
    SANDBOX_HOME,
    SLOTS_CACHE_NAME,
    SLOTS_DIR,
    batch_key,
    forwarded_tag_filters,
    reads_last_failed,
    runner_argv,
    runner_env,
)
from meshtest_pants.subsystem import MeshtestSubsystem
from meshtest_pants.target_types import (
    MeshtestCaseSourceField,
    MeshtestDeviceNeedField,
    MeshtestLaunchGroupsField,
    MeshtestParseErrorField,
    MeshtestPlatformField,
    MeshtestTimeoutField,
)


@dataclass(frozen=True)
class MeshtestCaseFieldSet(TestFieldSet):
    required_fields = (MeshtestCaseSourceField,)

    source: MeshtestCaseSourceField
    parse_error: MeshtestParseErrorField
    platform: MeshtestPlatformField
    timeout: MeshtestTimeoutField
    device_need: MeshtestDeviceNeedField
    launch_groups: MeshtestLaunchGroupsField
    resolve: PythonResolveField


class MeshtestTestRequest(TestRequest):
    tool_subsystem = MeshtestSubsystem
    field_set_type = MeshtestCaseFieldSet
    partitioner_type = PartitionerType.CUSTOM
    # `--debug` is not supported: Pants answers it with a NotImplementedError naming the goal.


@dataclass(frozen=True)
class MeshtestPartitionMetadata:
    """Shared by the case files of one partition; `description` also labels the slot audit log."""

    description: str


def partition_key(field_set: MeshtestCaseFieldSet, batch: bool, lane: str = "ranks",
                  pack: str = "launches") -> tuple[str, ...]:
    """Case files with equal keys run in one process (`runner_command.batch_key`)."""
    return batch_key(field_set.platform.value, field_set.resolve.value or "", field_set.launch_groups.value or (),
                     file=field_set.address.spec, broken=field_set.parse_error.value is not None, batch=batch,
                     lane=lane, pack=pack)


def partition_description(key: tuple[str, ...], field_sets) -> str:
    """How a batch names itself (progress lines, the slot audit log): its first file and how many
    more (`cases/torch/case_attention.py +24`), and the lane or packing when not the default."""
    if key[0] == "file":
        return key[1]
    first = min(fs.address.spec for fs in field_sets)
    more = f" +{len(field_sets) - 1}" if len(field_sets) > 1 else ""
    how = {("local",): " (local lane)", ("fill",): " (fill)"}.get(key[2:], "")
    return f"{first}{more}{how}"


@rule(desc="Partition meshtest case files by launch groups", level=LogLevel.DEBUG)
async def partition_meshtest_case_files(
    request: MeshtestTestRequest.PartitionRequest[MeshtestCaseFieldSet],
    meshtest: MeshtestSubsystem,
    global_options: GlobalOptions,
) -> Partitions[MeshtestCaseFieldSet, MeshtestPartitionMetadata]:
    lane = lane_of(forwarded_tag_filters(global_options.tag))
    by_key: dict[tuple[str, ...], list[MeshtestCaseFieldSet]] = {}
    for field_set in request.field_sets:
        by_key.setdefault(partition_key(field_set, meshtest.batch, lane, meshtest.pack.value), []).append(field_set)
    return Partitions(
        Partition(tuple(sorted(field_sets, key=lambda fs: fs.address.spec)),
                  MeshtestPartitionMetadata(partition_description(key, field_sets)))
        for key, field_sets in sorted(by_key.items())
    )


@dataclass(frozen=True)
class MeshtestRunnerSetupRequest:
    field_sets: tuple[MeshtestCaseFieldSet, ...]
    description: str


@dataclass(frozen=True)
class MeshtestRunnerSetup:
    process: Process


def cache_scope_for(test_subsystem: TestSubsystem, args: tuple[str, ...] = ()) -> ProcessCacheScope:
    """Cache passing runs only; with `--test-force`, or arguments that select by the last-failed
    cache (`--lf`, `--ff`: what runs depends on a file outside the cache key), rerun once per
    session."""
    if test_subsystem.force or reads_last_failed(args):
        return ProcessCacheScope.PER_SESSION
    return ProcessCacheScope.SUCCESSFUL


def batch_timeout(field_sets, test_subsystem: TestSubsystem) -> int | None:
    """Sum of the files' timeouts (a batch runs them one after another); None if any is unset."""
    timeouts = [fs.timeout.calculate_from_global_options(test_subsystem) for fs in field_sets]
    return None if any(t is None for t in timeouts) else sum(timeouts)


@rule(desc="Set up `python -m meshtest run` for case files", level=LogLevel.DEBUG)
async def setup_meshtest_runner_for_case_files(
    request: MeshtestRunnerSetupRequest,
    meshtest: MeshtestSubsystem,
    test_subsystem: TestSubsystem,
    test_extra_env: TestExtraEnv,
    global_options: GlobalOptions,
) -> MeshtestRunnerSetup:
    addresses = [fs.address for fs in request.field_sets]
    transitive_targets, interpreter_constraints, case_files = await MultiGet(
        Get(TransitiveTargets, TransitiveTargetsRequest(addresses)),
        Get(InterpreterConstraints, InterpreterConstraintsRequest(addresses)),
        Get(SourceFiles, SourceFilesRequest([fs.source for fs in request.field_sets])),
    )
    requirements_pex, sources, scratch_dirs = await MultiGet(
        Get(Pex, RequirementsPexRequest(addresses)),
        # `files` dependencies too (golden curves, data a case reads): a case must find in its
        # sandbox what its target depends on, as it does from the repository root.
        Get(PythonSourceFiles, PythonSourceFilesRequest(transitive_targets.closure, include_files=True)),
        Get(Digest, CreateDigest([Directory(ARTIFACTS_DIR), Directory(SANDBOX_HOME)])),
    )
    # A venv (not a zipped PEX) so `sys.executable` is an interpreter that has the requirements:
    # the runner starts its ranks with `sys.executable -m torch.distributed.run`.
    runner_venv, input_digest = await MultiGet(
        Get(
            VenvPex,
            PexRequest(
                output_filename="meshtest_runner.pex",
                internal_only=True,
                interpreter_constraints=interpreter_constraints,
                pex_path=[requirements_pex],
            ),
        ),
        Get(Digest, MergeDigests([sources.source_files.snapshot.digest, scratch_dirs])),
    )
    platforms = {fs.platform.value for fs in request.field_sets}
    process = await Get(
        Process,
        VenvPexProcess(
            runner_venv,
            argv=runner_argv(
                sorted(case_files.files),
                platform=platforms.pop(),
                device_kind=meshtest.device_kind.value,
                gates=meshtest.gates,
                tag_filters=forwarded_tag_filters(global_options.tag),
                device_need=max(fs.device_need.value or 0 for fs in request.field_sets),
                target=request.description,
                pack=meshtest.pack.value,
                args=tuple(meshtest.args),
            ),
            extra_env=runner_env(
                source_roots=sources.source_roots,
                slots=meshtest.slots,
                extra_env=test_extra_env.env,
            ),
            append_only_caches={SLOTS_CACHE_NAME: SLOTS_DIR, LASTFAILED_CACHE_NAME: LASTFAILED_DIR},
            input_digest=input_digest,
            output_directories=(ARTIFACTS_DIR,),
            timeout_seconds=batch_timeout(request.field_sets, test_subsystem),
            description=f"Run meshtest cases: {request.description} ({len(addresses)} file(s))",
            level=LogLevel.DEBUG,
            cache_scope=cache_scope_for(test_subsystem, tuple(meshtest.args)),
        ),
    )
    return MeshtestRunnerSetup(process)


def parse_error_process(bash: BashBinary, field_set: MeshtestCaseFieldSet) -> Process:
    """A process that prints the scan error and fails.

    A real process (rather than a hand-made result) gets the usual summary line and `--output`
    handling; failed results are never cached, so it reruns until the file is fixed.
    """
    message = field_set.parse_error.value or ""
    return Process(
        argv=(bash.path, "-c", 'printf "%s\\n" "$1"; exit 1', "meshtest", message),
        description=f"Report the scan error in {field_set.address}",
        level=LogLevel.DEBUG,
    )


@rule(desc="Run meshtest case files", level=LogLevel.DEBUG)
async def run_tests_with_meshtest(
    batch: MeshtestTestRequest.Batch[MeshtestCaseFieldSet, MeshtestPartitionMetadata],
    test_subsystem: TestSubsystem,
    bash: BashBinary,
) -> TestResult:
    broken = [fs for fs in batch.elements if fs.parse_error.value is not None]
    if broken:  # the partitioner puts a broken file in a batch of its own
        process = parse_error_process(bash, broken[0])
    else:
        setup = await Get(
            MeshtestRunnerSetup,
            MeshtestRunnerSetupRequest(tuple(batch.elements), batch.partition_metadata.description),
        )
        process = setup.process
    result = await Get(FallibleProcessResult, Process, process)
    artifacts = await Get(
        Digest, DigestSubset(result.output_digest, PathGlobs([f"{ARTIFACTS_DIR}/**"]))
    )
    extra_output = await Get(Snapshot, RemovePrefix(artifacts, ARTIFACTS_DIR))
    return TestResult.from_batched_fallible_process_result(
        result,
        batch=batch,
        output_setting=test_subsystem.output,
        extra_output=extra_output,
        log_extra_output=True,
    )


def rules():
    return [
        *collect_rules(),
        *MeshtestTestRequest.rules(),
    ]
