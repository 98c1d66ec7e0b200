from meshtest_pants.runner_command import (
    ARTIFACTS_DIR,
    forwarded_tag_filters,
    runner_argv,
    runner_env,
)


def test_forwarded_tag_filters_keep_each_clause_whole() -> None:
    assert forwarded_tag_filters(["+cpu_level0", "-mesh:8,mesh:4", "mesh:2,mesh:1", "-"]) == (
        "+cpu_level0",
        "-mesh:8,mesh:4",
        "mesh:2,mesh:1",
    )


def test_runner_argv_puts_options_before_the_case_file() -> None:
    argv = runner_argv(
        ["cases/torch/case_add.py", "cases/torch/case_mul.py"],
        platform="torch",
        device_kind="cpu",
        gates=["cpu_level0"],
        tag_filters=["-mesh:8"],
        device_need=4,
        target="torch w2-2+w4-4",
    )
    assert argv == (
        "-m",
        "meshtest",
        "run",
        f"--artifacts-dir={ARTIFACTS_DIR}",
        "--platform=torch",
        "--device-kind=cpu",
        "--device-need=4",
        "--target=torch w2-2+w4-4",
        "--gate=cpu_level0",
        "--tag=-mesh:8",
        "cases/torch/case_add.py",
        "cases/torch/case_mul.py",
    )


def test_runner_env_sets_source_roots_and_lets_extra_env_override() -> None:
    env = runner_env(source_roots=["src", "."], slots=4, extra_env={"OMP_NUM_THREADS": "2"})
    assert env["PEX_EXTRA_SYS_PATH"] == "src:."
    assert env["MESHTEST_SLOTS"] == "4"
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["HOME"].startswith("{chroot}/")
    assert env["MESHTEST_SLOT_DIR"].startswith("{chroot}/")


def test_batch_key_shares_processes_by_launch_groups_lane_and_packing() -> None:
    from meshtest_pants.runner_command import batch_key

    a = batch_key("torch", "python-default", ["w4", "w2"], file="a.py")
    assert a == batch_key("torch", "python-default", ["w2", "w4"], file="b.py")
    assert a == ("torch", "python-default", "w2", "w4")
    assert batch_key("torch", "python-default", ["w2"], file="a.py", broken=True) == ("file", "a.py")
    assert batch_key("torch", "python-default", ["w2"], file="a.py", batch=False) == ("file", "a.py")
    assert batch_key("torch", "r", ["w2"], lane="local") == batch_key("torch", "r", ["w8"], lane="local")
    assert batch_key("torch", "r", ["w2"], pack="fill") == ("torch", "r", "fill")


def test_runner_argv_passes_pack_fill_only() -> None:
    common = dict(platform="torch", device_kind="npu", gates=[], tag_filters=[], device_need=8, target="t")
    assert "--pack=fill" in runner_argv(["c.py"], pack="fill", **common)
    assert not any(a.startswith("--pack") for a in runner_argv(["c.py"], **common))


def test_passthrough_args_go_before_the_case_files_and_lf_is_never_cached() -> None:
    from meshtest_pants.runner_command import reads_last_failed

    common = dict(platform="torch", device_kind="cpu", gates=[], tag_filters=["cpu_level0"], device_need=2, target="t")
    argv = runner_argv(["c.py"], args=("-k", "mesh4 and not backward", "--lf"), **common)
    assert argv[-4:] == ("-k", "mesh4 and not backward", "--lf", "c.py")
    assert argv.index("--tag=cpu_level0") < argv.index("-k")
    assert reads_last_failed(["-k", "x", "--ff"]) and reads_last_failed(["--last-failed"])
    assert not reads_last_failed(["-k", "lf", "-v"])
    env = runner_env(source_roots=["src"], slots=4, extra_env={})
    assert env["MESHTEST_CACHE_DIR"].startswith("{chroot}/")
