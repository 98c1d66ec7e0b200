"""The library's operators, defined with ``torch.library.custom_op`` (torch's documented way to
add an operator that autograd, ``torch.compile`` and DTensor dispatch like a built-in one), each
with a fake (meta) kernel for shape propagation and a backward formula.

- ``shardops::row_scale(x, w)``: ``x * w[:, None]`` — each row ``i`` of ``x`` (shape ``(n, m)``)
  scaled by ``w[i]`` (shape ``(n,)``).
- ``shardops::col_sum(x, alpha)``: ``alpha * x.sum(0)`` — the columns of ``x`` (shape
  ``(n, m)``) summed and scaled, shape ``(m,)``.
"""
from __future__ import annotations

import torch


@torch.library.custom_op("shardops::row_scale", mutates_args=())
def row_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x * w[:, None]``: shapes ``(n, m)`` and ``(n,)`` → ``(n, m)``."""
    return x * w.unsqueeze(-1)


@row_scale.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _row_scale_backward(ctx, grad: torch.Tensor):
    x, w = ctx.saved_tensors
    return grad * w.unsqueeze(-1), (grad * x).sum(-1)


def _row_scale_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


row_scale.register_autograd(_row_scale_backward, setup_context=_row_scale_setup)


@torch.library.custom_op("shardops::col_sum", mutates_args=())
def col_sum(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """``alpha * x.sum(0)``: shape ``(n, m)`` → ``(m,)``."""
    return alpha * x.sum(0)


@col_sum.register_fake
def _(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return x.new_empty(x.shape[1:])


def _col_sum_backward(ctx, grad: torch.Tensor):
    return ctx.alpha * grad.unsqueeze(0).expand(ctx.shape).contiguous(), None


def _col_sum_setup(ctx, inputs, output) -> None:
    ctx.alpha, ctx.shape = inputs[1], inputs[0].shape


col_sum.register_autograd(_col_sum_backward, setup_context=_col_sum_setup)
