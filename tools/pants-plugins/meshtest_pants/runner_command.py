"""The command line and environment of `python -m meshtest run`, as pure functions.

Kept free of Pants imports so the contract with the runner is easy to read and unit-test.
"""

from __future__ import annotations

from typing import Iterable, Mapping

# Sandbox-relative directory the runner writes its artifacts to; Pants copies what ends up
# there to `dist/test/<target>/`.
ARTIFACTS_DIR = "extra-output"

# HOME inside the sandbox; `{chroot}` is replaced by the sandbox's absolute path at run time.
SANDBOX_HOME = ".home"

# The device-slot lock directory: a Pants named cache (`~/.cache/pants/named_caches/<name>`),
# linked into every sandbox at the same relative path, so concurrent test processes share it.
SLOTS_CACHE_NAME = "meshtest_slots"
SLOTS_DIR = ".meshtest-slots"

# The last-failed cases (`--lf`, `--ff`): a named cache as well, shared by every sandbox as
# pytest's `.pytest_cache` is by every run in a checkout (`meshtest.parent.selection`).
LASTFAILED_CACHE_NAME = "meshtest_cache"
LASTFAILED_DIR = ".meshtest-cache"

# Passthrough arguments whose run depends on the last-failed cache, not only on its inputs.
LAST_FAILED_ARGS = ("--lf", "--last-failed", "--ff", "--failed-first")


def reads_last_failed(args: Iterable[str]) -> bool:
    """Whether the runner's arguments select by the last-failed cache (`--lf`, `--ff`): such a
    process must not be read from Pants' cache, whose key does not hold the cache file."""
    return any(a in LAST_FAILED_ARGS for a in args)


def batch_key(platform: str, resolve: str, launch_groups: Iterable[str], *, file: str = "", broken: bool = False,
              batch: bool = True, lane: str = "ranks", pack: str = "launches") -> tuple[str, ...]:
    """Which test process a case file's target runs in: targets with equal keys share one
    (the plugin's partitioner; `tools/packing_model.py` replays it).

    A file whose scan failed is alone (it fails by itself); with `[meshtest].batch` off every
    file is alone (per-file caching, one launch per file and mesh group). In the one-process
    lane (`--tag=cpu_local`) the files of a platform share one process, which splits their
    cases over one simulating process per CPU core. With `[meshtest].pack = "fill"` the files
    of a platform share one process, which holds up to every device slot and runs its launches
    at once (a device node, where launch start-up dominates). Otherwise files with the same
    platform, resolve and launch groups share one, which starts each launch once for all of them.
    """
    if broken or not batch:
        return ("file", file)
    if lane == "local":
        return (platform, resolve, "local")
    if pack == "fill":
        return (platform, resolve, "fill")
    return (platform, resolve, *sorted(launch_groups))


def forwarded_tag_filters(global_tags: Iterable[str]) -> tuple[str, ...]:
    """Pants' `--tag` values, forwarded verbatim as the runner's `--tag` values.

    Each value is a clause (comma-separated tags ORed, a leading `-` negating the whole
    clause, clauses ANDed); the runner applies the same rule to cases
    (`meshtest.parent.planner.select_cases`), so the cases that run are exactly those the clauses
    select. Empty clauses are dropped.
    """
    return tuple(clause for clause in global_tags if clause.strip("+-"))


def runner_argv(
    case_files: Iterable[str],
    *,
    platform: str,
    device_kind: str,
    gates: Iterable[str],
    tag_filters: Iterable[str],
    device_need: int,
    target: str,
    pack: str = "launches",
    args: Iterable[str] = (),
) -> tuple[str, ...]:
    """Arguments after the interpreter: `-m meshtest run ... [args] <case_file>...`.

    `args` are `[meshtest].args` and the passthrough arguments after `--` (pytest's words: `-k`,
    `--lf`, ...), placed after the rule's own options and before the case files.

    `device_need` is the batch's resource tag (largest `device_need` of its targets): the runner
    holds that many device slots for the whole process. `target` labels the slot audit log.
    Values use the `--opt=value` form so an exclusion (`-mesh:8`) is not read as a flag.
    """
    return (
        "-m",
        "meshtest",
        "run",
        f"--artifacts-dir={ARTIFACTS_DIR}",
        f"--platform={platform}",
        f"--device-kind={device_kind}",
        f"--device-need={device_need}",
        f"--target={target}",
        *((f"--pack={pack}",) if pack != "launches" else ()),
        *(f"--gate={gate}" for gate in gates),
        *(f"--tag={tag}" for tag in tag_filters),
        *args,
        *case_files,
    )


def runner_env(
    *,
    source_roots: Iterable[str],
    slots: int,
    extra_env: Mapping[str, str],
) -> dict[str, str]:
    """The environment the rule gives the runner process (Pants starts it with nothing else).

    The Pex venv launcher adds `PATH` (from `[pex].executable_search_paths`, by default Pants'
    own PATH), `PEX_ROOT`, `VIRTUAL_ENV` and `[subprocess-environment].env_vars`.
    `extra_env` (from `[test].extra_env_vars`) is applied last, so it can override any entry.
    """
    return {
        "HOME": f"{{chroot}}/{SANDBOX_HOME}",
        # Read by the Pex venv's site hook in this process and in every process started with
        # the same interpreter (the torchrun ranks), so `import meshtest` works everywhere.
        "PEX_EXTRA_SYS_PATH": ":".join(source_roots),
        "OMP_NUM_THREADS": "1",
        "MESHTEST_SLOTS": str(slots),
        "MESHTEST_SLOT_DIR": f"{{chroot}}/{SLOTS_DIR}",
        "MESHTEST_CACHE_DIR": f"{{chroot}}/{LASTFAILED_DIR}",
        **extra_env,
    }
