"""The rank pipeline's step accounting, on a NumPy stand-in backend (no torch needed).

The stand-in "distributes" by wrapping the full array, so the pipeline's control flow —
which step failed, how outputs are selected and compared — is tested platform-free.
"""
from __future__ import annotations

import numpy as np

from meshtest import CompareSpec, DerivedSpec, InputSpec, OpShardCase, Shard
from meshtest.platforms.backend import ShardBackend
from meshtest.rank.entry import fails_suite
from meshtest.rank.pipeline import StepResult, run_case
from meshtest.status import Status, with_known_failure


class Dist:
    def __init__(self, a):
        self.a = a

    def __add__(self, other):
        return Dist(self.a + (other.a if isinstance(other, Dist) else other))

    def __sub__(self, other):
        return Dist(self.a - (other.a if isinstance(other, Dist) else other))


class NumpyBackend(ShardBackend):
    platform = "numpy"

    def init(self, device_kind, timeout_s): pass
    def rank(self): return 0
    def world_size(self): return 1
    def make_mesh(self, shape, names): return ("mesh", shape)
    def make_tensor(self, array, dtype, requires_grad=False): return np.array(array)
    def clone(self, tensor): return np.array(tensor)
    def distribute(self, tensor, mesh, placements): return Dist(np.array(tensor))
    def local_to_global(self, tensor): return tensor.a if isinstance(tensor, Dist) else tensor
    def is_tensor(self, obj): return isinstance(obj, (np.ndarray, Dist))
    def to_numpy(self, tensor): return np.asarray(tensor)
    def dtype_name(self, tensor): return str(np.asarray(tensor).dtype)
    def backward(self, outputs, grad_outputs): raise NotImplementedError("no autograd in the stand-in")
    def grad_of(self, tensor): return None
    def any_rank(self, flag): return flag
    def recover_after_failure(self, timeout_s): return True
    def shutdown(self): pass


def _case(fn, **kw):
    base = dict(name="c", fn=fn, inputs=[InputSpec((4, 4)), InputSpec((4, 4))], placements=[(Shard(0),), (Shard(0),)],
                mesh_shape=(1,), tags=("cpu_level0",))
    base.update(kw)
    return OpShardCase(**base).validated("f.py")


def _add(x, y):
    return x + y


def triple(r: StepResult):
    return (r.status, r.step, r.error)


def test_pass():
    assert triple(run_case(_case(_add), NumpyBackend(), None)) == ("pass", "compare", "")


def test_wrong_result_fails_at_compare():
    def off(x, y):
        return x + y + (0.5 if isinstance(x, Dist) else 0)
    status, step, err = triple(run_case(_case(off), NumpyBackend(), None))
    assert (status, step) == ("fail", "compare") and "elements outside" in err


def test_exception_in_distributed_run_is_an_error_at_run():
    def boom(x, y):
        if isinstance(x, Dist):
            raise RuntimeError("collective mismatch")
        return x + y
    status, step, err = triple(run_case(_case(boom), NumpyBackend(), None))
    assert (status, step) == ("error", "run") and "RuntimeError: collective mismatch" in err


def test_compare_outputs_out_of_range_names_the_case():
    def two(x, y):
        return (x + y, x)
    status, step, err = triple(run_case(_case(two, compare_outputs=(0, 2)), NumpyBackend(), None))
    assert (status, step) == ("error", "gather")
    assert "case 'c': compare_outputs (0, 2) out of range: fn returned 2 output(s)" in err


def test_compare_outputs_ignores_unselected_outputs():
    def two(x, y):
        return (x + y, np.random.rand(3) if not isinstance(x, Dist) else Dist(np.random.rand(3)))
    assert run_case(_case(two, compare_outputs=(0,)), NumpyBackend(), None).status == "pass"


def test_non_tensor_output_is_an_error_naming_it():
    status, step, err = triple(run_case(_case(lambda x, y: 3), NumpyBackend(), None))
    assert (status, step) == ("error", "reference") and "returned int, not a tensor" in err


def test_derived_input_is_computed_on_full_inputs_and_passed_after_primaries():
    seen = []

    def derive(x, y):
        seen.append(x.shape)
        return x.max(axis=1, keepdims=True)

    def fn(x, y, m):
        return x - m
    case = _case(fn, derived_inputs=[DerivedSpec(derive, (Shard(0),), ndim=2)])
    assert run_case(case, NumpyBackend(), None).status == "pass"
    assert seen == [(4, 4)]


def test_reference_cannot_corrupt_distributed_inputs():
    def inplace(x, y):
        if isinstance(x, Dist):
            return x + y
        x += 1.0  # the reference mutates its inputs
        return x + y - 1.0
    assert run_case(_case(inplace), NumpyBackend(), None).status == "pass"


def test_known_failure_mapping():
    kf = _case(_add, known_failure="upstream bug #1")
    assert with_known_failure(Status.FAIL, kf.known_failure is not None) == "xfail"
    assert with_known_failure(Status.PASS, kf.known_failure is not None) == "xpass"
    assert with_known_failure(Status.FAIL, _case(_add).known_failure is not None) == "fail"


def test_equal_and_shape_compare():
    def noisy(x, y):
        return x + y + (1.0 if isinstance(x, Dist) else 0.0)
    assert run_case(_case(noisy, compare=CompareSpec.shape("random")), NumpyBackend(), None).status == "pass"
    assert run_case(_case(noisy, compare=CompareSpec.equal()), NumpyBackend(), None).status == "fail"


class _Ranks(NumpyBackend):
    """Stand-in whose any_rank answers as if another rank had reported ``others``."""

    def __init__(self, others):
        self.others = others

    def any_rank(self, flag):
        return flag or self.others


def test_fail_fast_decision_matches_the_aggregate_rule():
    plain, known = _case(_add), _case(_add, known_failure="torch bug #1")
    assert fails_suite(_Ranks(False), plain, Status.PASS) is False
    assert fails_suite(_Ranks(True), plain, Status.PASS) is True       # another rank failed
    assert fails_suite(_Ranks(False), known, Status.PASS) is True       # xpass on every rank
    assert fails_suite(_Ranks(True), known, Status.PASS) is False       # xfail somewhere: expected
    assert fails_suite(_Ranks(False), None, Status.ERROR) is True       # file could not be loaded
