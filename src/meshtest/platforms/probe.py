"""Ask a platform, in a process of its own, whether this machine can run its ranks on a device kind.

``python -m meshtest.platforms.probe --platform torch --device-kind npu --need 4`` prints nothing
and exits 0 when it can; otherwise it prints one line naming what is missing (the backend's
:meth:`meshtest.platforms.backend.ShardBackend.device_problem`) and exits 1. The runner calls it
(:func:`problem`) before the first launch of a non-CPU device kind: the runner itself never
imports a platform library.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Optional

#: Seconds the probe may take (importing torch_npu or mindspore, counting devices).
PROBE_TIMEOUT_S = 180.0


def problem(platform: str, device_kind: str, need: int, python: str = sys.executable,
            env: Optional[dict] = None) -> Optional[str]:
    """Run the probe with ``python``; ``None`` when the machine can run ``need`` ranks of
    ``platform`` on ``device_kind``, otherwise the probe's one line."""
    cmd = [python, "-m", "meshtest.platforms.probe", f"--platform={platform}", f"--device-kind={device_kind}",
           f"--need={need}"]
    if env is None:
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        if device_kind == "npu":  # as for the ranks (meshtest.parent.launch): torch_npu is imported by the backend
            env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return f"the {device_kind} device probe of platform {platform!r} did not answer within {PROBE_TIMEOUT_S:.0f} s"
    if done.returncode == 0:
        return None
    # the answer is the probe's last line on stdout; a platform library may log to stderr meanwhile
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()] or [ln for ln in done.stderr.splitlines()
                                                                         if ln.strip()]
    return lines[-1] if lines else f"the {device_kind} device probe of platform {platform!r} exited {done.returncode}"


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="meshtest.platforms.probe")
    ap.add_argument("--platform", required=True)
    ap.add_argument("--device-kind", required=True)
    ap.add_argument("--need", type=int, default=1)
    args = ap.parse_args(argv)
    from .registry import load_backend

    try:
        backend = load_backend(args.platform, device_kind=args.device_kind)
        why = backend.device_problem(args.device_kind, args.need)
    except Exception as e:  # an adapter that cannot even load: that is the answer
        why = f"platform {args.platform!r} on {args.device_kind}: {type(e).__name__}: {e}".splitlines()[0]
    if why:
        print(why)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
