"""A distributed output's global metadata against the single-device reference's.

The gathered values are compared at step ``compare`` (shape and dtype included,
:func:`meshtest.rank.compare.compare_arrays`). What the values cannot show is whether the
distributed tensor *describes* itself as the op's single-device result does: its global
strides, whether it is contiguous, whether autograd tracks it. A sharding rule that gets
these wrong (a view whose DTensor claims contiguous strides, an output that drops
``requires_grad``) hands every later op wrong metadata while the values still gather right.
So at step ``output-metadata``, before the gather, each compared output's metadata is checked
against the reference's (:func:`check_against_reference`).

The semantics compared, per output, where the shapes agree (a shape or dtype that differs is
step ``compare``'s finding, as before):

- **significant strides**: the stride of every dim of size > 1, and none when the tensor has no
  element. A size-1 dim's stride never addresses a second element, and the layout of an empty
  tensor holds nothing, so torch leaves both free (its own OpInfo meta tests compare strides
  this way: ``torch._prims_common.check_significant_strides``);
- **contiguity**: ``is_contiguous()`` (row-major, under the same rule);
- **requires_grad**: whether autograd records the output.

A difference that DTensor documents is declared, not tolerated silently: an op case lists the
fields it exempts with the reason (``CompareSpec.exempt_metadata``). No case of the corpus
declares one on torch 2.13; the differences found are torch bugs, pinned as known failures
(docs/torch-bugs.md#memory-format-cache-key).

Stdlib only, no platform import (the platform answers :meth:`ShardBackend.tensor_meta`).
"""
from __future__ import annotations

from typing import Iterable, Tuple

from ..model.layout import METADATA_FIELDS as FIELDS
from ..model.layout import TensorMeta
from .compare import CompareError


def significant_strides(shape: Tuple[int, ...], stride: Tuple[int, ...]) -> Tuple[Tuple[int, int], ...]:
    """``(dim, stride)`` for every dim of size > 1; ``()`` when the tensor has no element
    (the module docstring: the strides a layout's meaning depends on).

    :raises ValueError: ``shape`` and ``stride`` differ in length."""
    if len(shape) != len(stride):
        raise ValueError(f"shape {tuple(shape)} and stride {tuple(stride)} differ in length")
    if any(s == 0 for s in shape):
        return ()
    return tuple((d, st) for d, (s, st) in enumerate(zip(shape, stride)) if s > 1)


def check_against_reference(expected: TensorMeta, actual: TensorMeta, label: str,
                            exempt: Iterable[str] = ()) -> None:
    """Check a distributed output's global metadata (``actual``) against the single-device
    reference's (``expected``), field by field in :data:`FIELDS` order, skipping ``exempt``.
    Nothing is checked when the shapes or dtypes differ (step ``compare`` reports those).

    :param label: names the output in messages, e.g. ``"output[1]"``.
    :raises CompareError: ``output[0]: global stride (1, 4) != reference stride (4, 1) (the
        distributed output describes another memory layout than the op's single-device result)``,
        with the signature ``output[0] stride (1, 4) vs (4, 1)``; the same for ``contiguous`` and
        ``requires_grad``. ``ValueError``: ``exempt`` names a field not in :data:`FIELDS`.
    """
    skip = set(exempt)
    unknown = skip - set(FIELDS)
    if unknown:
        raise ValueError(f"metadata_exempt names {sorted(unknown)}; the fields are {', '.join(FIELDS)}")
    if tuple(expected.shape) != tuple(actual.shape) or expected.dtype != actual.dtype:
        return
    if "stride" not in skip:
        want = significant_strides(expected.shape, expected.stride)
        got = significant_strides(actual.shape, actual.stride)
        if want != got:
            raise CompareError(
                f"{label}: global stride {tuple(actual.stride)} != reference stride {tuple(expected.stride)} "
                f"(shape {tuple(expected.shape)}; the distributed output describes another memory layout than "
                "the op's single-device result)",
                f"{label} stride {tuple(actual.stride)} vs {tuple(expected.stride)}")
    if "contiguous" not in skip and expected.contiguous != actual.contiguous:
        raise CompareError(
            f"{label}: is_contiguous() {actual.contiguous} != reference {expected.contiguous} "
            f"(shape {tuple(expected.shape)}, stride {tuple(actual.stride)} vs reference {tuple(expected.stride)})",
            f"{label} contiguous {actual.contiguous} vs {expected.contiguous}")
    if "requires_grad" not in skip and expected.requires_grad != actual.requires_grad:
        raise CompareError(
            f"{label}: requires_grad {actual.requires_grad} != reference {expected.requires_grad} (autograd "
            f"{'records' if actual.requires_grad else 'does not record'} the distributed output, "
            f"{'but does' if expected.requires_grad else 'but not'} the single-device one)",
            f"{label} requires_grad {actual.requires_grad} vs {expected.requires_grad}")
