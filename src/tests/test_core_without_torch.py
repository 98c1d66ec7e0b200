"""The platform-agnostic core must import and plan with torch (and Ray) made unimportable; the
default resolve, the main job's, does not even install Ray."""
from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import textwrap

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
#: the only module that imports Ray (the `ray` resolve's)
RAY_EXECUTOR = "meshtest.parent.ray_executor"
#: what the warm launcher's fork server imports for the torch platform: torch, by design
TORCH_WARM = "meshtest.rank.torch_warm"


def _core_modules():
    mods = ["meshtest"]
    for info in pkgutil.walk_packages(meshtest.__path__, "meshtest."):
        adapter = info.name.startswith("meshtest.platforms.") and info.name != "meshtest.platforms.backend"
        if not adapter and info.name not in ("meshtest.__main__", RAY_EXECUTOR, TORCH_WARM):
            mods.append(info.name)
    return mods


def test_every_core_module_imports_with_torch_blocked(tmp_path):
    mods = _core_modules()
    assert "meshtest.parent.runner" in mods and "meshtest.rank.entry" in mods and len(mods) >= 12
    assert "meshtest.platforms.backend" in mods and not any(m.startswith("meshtest.platforms.torch") for m in mods)
    assert "meshtest.parent.executor" in mods and RAY_EXECUTOR not in mods
    case = tmp_path / "case_x.py"
    case.write_text("register(OpShardCase(name='a', mesh_shape=(2, 2), tags=('cpu_level0',)))\n")
    script = textwrap.dedent(f"""
        import importlib, sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('torch', 'mindspore', 'torch_npu', 'ray'):
                    raise ImportError('blocked for this test: ' + name)
                return None

        sys.meta_path.insert(0, Block())
        for m in {mods!r}:
            importlib.import_module(m)
        from meshtest.parent.runner import scan_files
        from meshtest.parent.planner import plan_groups, select_cases
        cases, errors, _ = scan_files([{str(case)!r}])
        assert not errors, errors
        print([g.group_id for g in plan_groups(select_cases(cases, 'cpu'))])
        bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'mindspore', 'ray')]
        assert not bad, bad
        from meshtest.parent import executor
        assert executor.connect('local') is None and executor.connect('auto') is None  # no Ray: this machine
        try:
            import torch
        except ImportError as e:
            print('torch blocked:', e)
    """)
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC_ROOT},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "['w4']" in out.stdout and "torch blocked" in out.stdout


def test_scan_module_runs_on_stdlib_only():
    """The Pants plugin imports the scan, the planner and the rules inside Pants' interpreter,
    which has no NumPy; tools/ read results with the system python3 through the contract."""
    script = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('numpy', 'torch', 'jinja2', 'junitparser'):
                    raise ImportError(name)
        sys.meta_path.insert(0, Block())
        import meshtest.contract, meshtest.status, meshtest.report.results, meshtest.model.rules
        from meshtest.parent.planner import plan_groups
        from meshtest.model.scan import scan_case_source
        print(scan_case_source('x.py', "register(OpShardCase(name='a', mesh_shape=(4,), tags=('cpu_level1',)))")
              .device_need)
    """)
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC_ROOT},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"


def test_the_default_resolve_does_not_install_ray():
    """Ray is in the `ray` resolve only: the main job's lockfile (python-default) neither asks for
    it nor pulls it in; the `ray` resolve's does."""
    locks = os.path.join(os.path.dirname(SRC_ROOT), "3rdparty", "python")
    with open(os.path.join(locks, "default.lock"), encoding="utf-8") as f:
        default = f.read()
    with open(os.path.join(locks, "ray.lock"), encoding="utf-8") as f:
        with_ray = f.read()
    assert '"project_name": "ray"' not in default and '"project_name": "ray"' in with_ray
