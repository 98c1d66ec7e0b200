"""`./pants test` for `meshtest_case_file` targets: one `python -m meshtest run` per case file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshtest_pants.runner_command import (
    ARTIFACTS_DIR,
    SANDBOX_HOME,
    SLOTS_CACHE_NAME,
    SLOTS_DIR,
    forwarded_tag_filters,
    runner_argv,
    runner_env,
)
from meshtest_pants.subsystem import MeshtestSubsystem
from meshtest_pants.target_types import (
    MeshtestCaseSourceField,
    MeshtestParseErrorField,
    MeshtestPlatformField,
    MeshtestTimeoutField,
)
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


@dataclass(frozen=True)
class MeshtestCaseFieldSet(TestFieldSet):
    required_fields = (MeshtestCaseSourceField,)

    source: MeshtestCaseSourceField
    parse_error: MeshtestParseErrorField
    platform: MeshtestPlatformField
    timeout: MeshtestTimeoutField


class MeshtestTestRequest(TestRequest):
    tool_subsystem = MeshtestSubsystem
    field_set_type = MeshtestCaseFieldSet
    # `--debug` is not supported: Pants answers it with a NotImplementedError naming the goal.


@dataclass(frozen=True)
class MeshtestRunnerSetup:
    process: Process


def cache_scope_for(test_subsystem: TestSubsystem) -> ProcessCacheScope:
    """Cache passing runs only; with `--test-force`, rerun once per session."""
    return ProcessCacheScope.PER_SESSION if test_subsystem.force else ProcessCacheScope.SUCCESSFUL


@rule(desc="Set up `python -m meshtest run` for a case file", level=LogLevel.DEBUG)
async def setup_meshtest_runner_for_case_file(
    field_set: MeshtestCaseFieldSet,
    meshtest: MeshtestSubsystem,
    test_subsystem: TestSubsystem,
    test_extra_env: TestExtraEnv,
    global_options: GlobalOptions,
) -> MeshtestRunnerSetup:
    address = field_set.address
    transitive_targets, interpreter_constraints, case_file = await MultiGet(
        Get(TransitiveTargets, TransitiveTargetsRequest([address])),
        Get(InterpreterConstraints, InterpreterConstraintsRequest([address])),
        Get(SourceFiles, SourceFilesRequest([field_set.source])),
    )
    requirements_pex, sources, scratch_dirs = await MultiGet(
        Get(Pex, RequirementsPexRequest([address])),
        Get(PythonSourceFiles, PythonSourceFilesRequest(transitive_targets.closure)),
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
    process = await Get(
        Process,
        VenvPexProcess(
            runner_venv,
            argv=runner_argv(
                case_file.files[0],
                platform=field_set.platform.value,
                device_kind=meshtest.device_kind.value,
                gates=meshtest.gates,
                tag_filters=forwarded_tag_filters(global_options.tag),
            ),
            extra_env=runner_env(
                source_roots=sources.source_roots,
                slots=meshtest.slots,
                extra_env=test_extra_env.env,
            ),
            append_only_caches={SLOTS_CACHE_NAME: SLOTS_DIR},
            input_digest=input_digest,
            output_directories=(ARTIFACTS_DIR,),
            timeout_seconds=field_set.timeout.calculate_from_global_options(test_subsystem),
            description=f"Run meshtest cases in {address}",
            level=LogLevel.DEBUG,
            cache_scope=cache_scope_for(test_subsystem),
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
    batch: MeshtestTestRequest.Batch[MeshtestCaseFieldSet, Any],
    test_subsystem: TestSubsystem,
    bash: BashBinary,
) -> TestResult:
    field_set = batch.single_element
    if field_set.parse_error.value is not None:
        process = parse_error_process(bash, field_set)
    else:
        setup = await Get(MeshtestRunnerSetup, MeshtestCaseFieldSet, field_set)
        process = setup.process
    result = await Get(FallibleProcessResult, Process, process)
    artifacts = await Get(
        Digest, DigestSubset(result.output_digest, PathGlobs([f"{ARTIFACTS_DIR}/**"]))
    )
    extra_output = await Get(Snapshot, RemovePrefix(artifacts, ARTIFACTS_DIR))
    return TestResult.from_fallible_process_result(
        result,
        address=field_set.address,
        output_setting=test_subsystem.output,
        extra_output=extra_output,
        log_extra_output=True,
    )


def rules():
    return [
        *collect_rules(),
        *MeshtestTestRequest.rules(),
    ]
