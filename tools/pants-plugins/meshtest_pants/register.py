"""Wiring of the meshtest Pants plugin (enabled in pants.toml as `meshtest_pants`)."""

from meshtest_pants import dispatch_deps, generate_targets, meshtest_test_runner
from meshtest_pants.subsystem import MeshtestSubsystem
from meshtest_pants.target_types import MeshtestCaseFileTarget, MeshtestCasesGeneratorTarget


def target_types():
    return [MeshtestCasesGeneratorTarget, MeshtestCaseFileTarget]


def rules():
    return [
        *dispatch_deps.rules(),
        *generate_targets.rules(),
        *meshtest_test_runner.rules(),
        *MeshtestSubsystem.rules(),
    ]
