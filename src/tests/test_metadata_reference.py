"""The check of a distributed output's global metadata against the reference's
(:mod:`meshtest.rank.metadata`), table-driven. The expected answers come from the semantics the
module cites — a stride matters only on a dim of size > 1 of a non-empty tensor (torch's
``check_significant_strides``) — worked out by hand here, not from the code under test."""
from __future__ import annotations

import pytest

from meshtest.model.compare_spec import CompareSpec
from meshtest.model.layout import TensorMeta
from meshtest.rank.compare import CompareError
from meshtest.rank.metadata import check_against_reference, significant_strides


def _meta(shape, stride, contiguous=None, dtype="float32", requires_grad=False) -> TensorMeta:
    if contiguous is None:  # row-major by hand: each stride the product of the sizes after it
        want, acc = [], 1
        for s in reversed(shape):
            want.insert(0, acc)
            acc *= s
        contiguous = all(st == w for s, st, w in zip(shape, stride, want) if s > 1)
    return TensorMeta(tuple(shape), tuple(stride), contiguous, dtype, requires_grad)


@pytest.mark.parametrize("shape, stride, significant", [
    ((4, 3), (3, 1), ((0, 3), (1, 1))),
    ((4, 1, 3), (3, 3, 1), ((0, 3), (2, 1))),  # the size-1 dim's stride addresses nothing
    ((4, 1, 3), (3, 99, 1), ((0, 3), (2, 1))),
    ((4, 0, 3), (3, 3, 1), ()),  # an empty tensor: no layout at all
    ((), (), ()),
    ((1, 1), (1, 1), ()),
])
def test_significant_strides(shape, stride, significant):
    assert significant_strides(shape, stride) == significant


def test_significant_strides_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match=r"shape \(2, 3\) and stride \(1,\)"):
        significant_strides((2, 3), (1,))


AGREE = [
    (_meta((4, 3), (3, 1)), _meta((4, 3), (3, 1))),
    (_meta((4, 1, 3), (3, 3, 1)), _meta((4, 1, 3), (3, 1, 1))),  # differ only on a size-1 dim
    (_meta((0, 3), (3, 1)), _meta((0, 3), (1, 0), contiguous=True)),  # empty
    (_meta((3, 4), (1, 3)), _meta((3, 4), (1, 3))),  # both transposed
    (_meta((4, 3), (3, 1)), _meta((4, 5), (1, 4))),  # a shape differs: step compare says so
    (_meta((4, 3), (3, 1)), _meta((4, 3), (1, 4), dtype="float64")),  # a dtype differs: the same
]


@pytest.mark.parametrize("want, got", AGREE)
def test_agreeing_metadata_passes(want, got):
    check_against_reference(want, got, "output[0]")


DIFFER = [
    # a transpose's DTensor claiming the contiguous layout: the stride is found first
    (_meta((3, 4), (1, 3)), _meta((3, 4), (4, 1)), "output[0] stride (4, 1) vs (1, 3)",
     r"global stride \(4, 1\) != reference stride \(1, 3\)"),
    # strides that agree where they matter, but one side says it is not contiguous
    (_meta((4, 3), (3, 1)), _meta((4, 3), (3, 1), contiguous=False), "output[0] contiguous False vs True",
     r"is_contiguous\(\) False != reference True"),
    (_meta((4, 3), (3, 1), requires_grad=True), _meta((4, 3), (3, 1)), "output[0] requires_grad False vs True",
     r"requires_grad False != reference True"),
    (_meta((2, 2, 2), (4, 2, 1)), _meta((2, 2, 2), (4, 1, 2)), "output[0] stride (4, 1, 2) vs (4, 2, 1)",
     "stride"),
]


@pytest.mark.parametrize("want, got, signature, message", DIFFER)
def test_differing_metadata_fails_naming_the_field(want, got, signature, message):
    with pytest.raises(CompareError, match=message) as e:
        check_against_reference(want, got, "output[0]")
    assert e.value.signature == signature
    assert str(e.value).startswith("output[0]: ")


def test_an_exempt_field_is_not_compared_and_the_others_still_are():
    want, got = _meta((3, 4), (1, 3), requires_grad=True), _meta((3, 4), (4, 1))
    with pytest.raises(CompareError, match="requires_grad"):
        check_against_reference(want, got, "output[0]", exempt=("stride", "contiguous"))
    check_against_reference(want, got, "output[0]", exempt=("stride", "contiguous", "requires_grad"))


def test_an_unknown_exempt_field_is_refused():
    with pytest.raises(ValueError, match="metadata_exempt names \\['storage'\\]"):
        check_against_reference(_meta((2,), (1,)), _meta((2,), (1,)), "output[0]", exempt=("storage",))


def test_compare_spec_declares_an_exemption_with_its_reason():
    spec = CompareSpec.equal().exempt_metadata("stride", "contiguous", reason="DTensor docs: ...")
    assert spec.metadata_exempt == ("stride", "contiguous") and spec.metadata_reason == "DTensor docs: ..."
    assert spec.kind == "equal"
    with pytest.raises(ValueError, match="needs a reason"):
        CompareSpec.equal().exempt_metadata("stride", reason=" ")
    with pytest.raises(ValueError, match="the fields compared with the reference are stride, contiguous, "
                                         "requires_grad"):
        CompareSpec.equal().exempt_metadata("shape", reason="x")
    with pytest.raises(ValueError, match="the fields compared"):
        CompareSpec.equal().exempt_metadata(reason="x")
