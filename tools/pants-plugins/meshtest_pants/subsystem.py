"""The `[meshtest]` options section."""

from __future__ import annotations

from enum import Enum

from pants.option.option_types import (
    ArgsListOption,
    BoolOption,
    DictOption,
    EnumOption,
    IntOption,
    SkipOption,
    StrListOption,
)
from pants.option.subsystem import Subsystem
from pants.util.strutil import help_text


class Pack(Enum):
    """How test processes take device slots (`python -m meshtest run --pack`)."""

    launches = "launches"
    fill = "fill"


class DeviceKind(Enum):
    """Devices the runner can place ranks on."""

    cpu = "cpu"
    npu = "npu"
    cuda = "cuda"


class MeshtestSubsystem(Subsystem):
    options_scope = "meshtest"
    name = "meshtest"
    help = help_text(
        """
        Options for running `meshtest_case_file` targets with `python -m meshtest run`.
        """
    )

    skip = SkipOption("test")
    args = ArgsListOption(
        example="-k 'mesh4 and not backward' --lf",
        tool_name="`python -m meshtest run`",
        passthrough=True,
        extra_help=help_text(
            """
            pytest's selection and reporting words (`-k`, `--lf`, `--ff`, `-x`, `-v`, `-q`,
            `--durations=N`), also given after `--`:
            `./pants test cases/torch/case_sort.py -- -k 'mesh4 and not backward'`. They are part of
            the runner's command line and so of each test process's cache key (a run with other
            arguments is not a cache hit). `-k` narrows what `--tag` selected: a target runs the cases
            that match both. With `--lf`/`--ff` the process is never read from the cache (what it runs
            depends on the last-failed cases, kept in the named cache `meshtest_cache`).
            """
        ),
    )
    slots = IntOption(
        default=8,
        help=help_text(
            """
            Size of the device-slot pool shared by all concurrent test processes, passed to the
            runner as `MESHTEST_SLOTS`. The pool's lock files live in the Pants named cache
            `meshtest_slots`, linked into each sandbox and named by `MESHTEST_SLOT_DIR`.
            """
        ),
    )
    device_kind = EnumOption(
        default=DeviceKind.cpu,
        help=help_text(
            """
            Kind of device the ranks run on, passed to the runner as `--device-kind`.
            """
        ),
    )
    batch = BoolOption(
        default=True,
        help=help_text(
            """
            Run case files that plan into the same launch groups (same platform and meshes) in
            one test process, which starts each launch once for all of them. Off: one process
            per file (per-file caching; one launch per file and mesh group). See
            WORKSPACE-notes.md, "Batching", for the trade-off.
            """
        ),
    )
    pack = EnumOption(
        default=Pack.launches,
        help=help_text(
            """
            `launches` (default): case files that plan into the same launch groups share a test
            process, which holds its largest launch's device slots and starts launches as they fit.
            `fill`: the case files of a platform share one process, which holds up to every slot
            of the pool, splits long launch groups and runs its launches at once — for a device
            node, where a launch's start-up (HCCL initialisation) costs more than many cases
            (`python3 tools/bench.py --model npu8` compares the two). Coarser caching: one
            changed case file reruns the whole batch.
            """
        ),
    )
    gates = StrListOption(
        default=[],
        help=help_text(
            """
            Gates to run (e.g. `cpu_level0`), each passed to the runner as `--gate=<gate>`.
            Example: `./pants test --meshtest-gates=cpu_level0 cases::`
            """
        ),
    )
    runner_dependencies = StrListOption(
        default=["src/meshtest"],
        help=help_text(
            """
            Addresses every generated `meshtest_case_file` depends on: the code behind
            `python -m meshtest run`. Dependency inference only sees what a case file imports;
            this adds the runner itself, so changes to it rerun every case file. Used for case files
            in a resolve `runner_dependencies_by_resolve` does not name.
            """
        ),
    )
    runner_dependencies_by_resolve = DictOption[list](
        default={"mindspore": ["src/meshtest:mindspore"]},
        help=help_text(
            """
            Per Python resolve, the runner addresses a `meshtest_case_file` of that resolve depends on
            instead of `runner_dependencies` (a target depends only on code of its own resolve: the
            `mindspore` resolve's runner is the package without the torch adapters).
            """
        ),
    )
