"""The rank pipeline's step accounting, on a NumPy stand-in backend (no torch needed).

The stand-in "distributes" by wrapping the full array, so the pipeline's control flow —
which step failed, how outputs are selected and compared — is tested platform-free.
"""
from __future__ import annotations

import numpy as np

from meshtest import CompareSpec, DerivedSpec, InputSpec, OpShardCase, Shard
from meshtest.model.known import KnownFailure, judge
from meshtest.platforms.backend import ShardBackend
from meshtest.rank.entry import fails_suite
from meshtest.rank.pipeline import StepResult, run_case
from meshtest.status import Status


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
    assert (status, step) == ("error", "run")
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


KF = KnownFailure(kind="raises", step="run", match=r"NotImplementedError: .*fill_", reason="no rule",
                  upstream="pytorch/pytorch#1")


def test_a_known_failure_is_xfail_only_when_it_fails_the_declared_way():
    err = "NotImplementedError: aten.fill_.Tensor has no strategy\nTraceback (most recent call last):\n  x.py"
    assert judge(KF, Status.ERROR, "run", err) == (Status.XFAIL, err)
    status, text = judge(KF, Status.PASS, "compare", "")
    assert status is Status.XPASS and "remove the mark" in text
    # another failure than the declared one: fail, saying what was expected and what happened
    typo = "AttributeError: 'Tensor' object has no attribute 'dobule'"
    status, text = judge(KF, Status.ERROR, "reference", typo)
    assert status is Status.FAIL and text.startswith("expected raises at step run matching /NotImplementedError")
    assert "got error at step reference: AttributeError" in text
    assert judge(KF, Status.ERROR, "backward", err)[0] is Status.FAIL           # another step
    assert judge(KF, Status.FAIL, "run", err)[0] is Status.FAIL                 # a mismatch, not a raise
    # the pattern is matched before the traceback: a frame's source text cannot satisfy it
    framed = "RuntimeError: x\nTraceback (most recent call last):\n fill_ NotImplementedError: "
    assert judge(KF, Status.ERROR, "run", framed)[0] is Status.FAIL
    assert judge(KF, Status.UNSUPPORTED, "features", "no")[0] is Status.UNSUPPORTED
    assert judge(None, Status.ERROR, "run", err) == (Status.ERROR, err)


def test_equal_and_shape_compare():
    def noisy(x, y):
        return x + y + (1.0 if isinstance(x, Dist) else 0.0)
    assert run_case(_case(noisy, compare=CompareSpec.shape("random")), NumpyBackend(), None).status == "pass"
    assert run_case(_case(noisy, compare=CompareSpec.equal()), NumpyBackend(), None).status == "fail"


class _Peers(NumpyBackend):
    """Stand-in for a launch: any_rank answers over this rank's and the other ranks' judged
    statuses (fails_suite asks its two questions in a fixed order, as every rank does)."""

    def __init__(self, mine, others):
        self.statuses = [mine, *others]
        self.questions = iter((lambda s: s.failing and s is not Status.XPASS, lambda s: s is not Status.XPASS))

    def any_rank(self, flag):
        question = next(self.questions)
        assert flag == question(self.statuses[0])
        return any(question(s) for s in self.statuses)


def test_fail_fast_decision_matches_the_aggregate_rule():
    assert fails_suite(_Peers(Status.PASS, [Status.PASS]), Status.PASS) is False
    assert fails_suite(_Peers(Status.PASS, [Status.FAIL]), Status.PASS) is True        # another rank failed
    assert fails_suite(_Peers(Status.XPASS, [Status.XPASS]), Status.XPASS) is True     # xpass on every rank
    assert fails_suite(_Peers(Status.XPASS, [Status.XFAIL]), Status.XPASS) is False    # xfail somewhere: expected
    assert fails_suite(_Peers(Status.XFAIL, [Status.XFAIL]), Status.XFAIL) is False
    assert fails_suite(_Peers(Status.FAIL, [Status.XFAIL]), Status.FAIL) is True       # failed another way
    assert fails_suite(_Peers(Status.ERROR, []), Status.ERROR) is True                 # file could not be loaded
