"""Public FSDP2 / TP / pipelining / state-dict bug reports, each written as the training case (or,
for a report about an API in itself, the scenario) its report describes, trained against the
single-device baseline. A report torch 2.13 still shows is a known failure with its upstream id.

- pytorch/pytorch#190746: under ``loss_parallel()`` the backward of ``log_softmax`` is replaced by
  the identity, which is right only when the cross-entropy consumes it; a soft-label loss
  ``-(log_softmax(logits) * w).sum()`` over vocabulary-sharded logits gets wrong gradients from
  step 0 (still wrong). The model's head is ColwiseParallel with ``Shard(-1)`` logits, the soft
  labels are distributed ``Shard(-1)`` like them.
- pytorch/pytorch#172543: a gradient penalty (``autograd.grad(..., create_graph=True)`` inside the
  forward, its square in the loss) through an FSDP2 module fails in the double backward: the
  unsharded parameter the second backward needs has been freed (still wrong).
- pytorch/pytorch#185331: a pipeline stage's input is its receive buffer, reused from step to
  step, so a tensor hook a forward pre-hook registers on the input (here: scale the boundary
  gradient by 0.5) stays on the buffer and piles up: the next stage-boundary gradient is halved
  once more every step (still wrong; step 0 agrees).
- pytorch/pytorch#164843: ``set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True)``
  given the FSDP2 model's own DTensor-valued state dict calls ``c10d.broadcast_`` on a DTensor:
  rank 0 raises and the others lose their peer inside the collective (still wrong; a scenario,
  alone in its launch). The supported form — a plain full state dict on rank 0 — is the
  training net's ``checkpoint="full_broadcast"`` resume.
"""
from cases.torch.training.models import mlp, mse, regression, stack, stack_stage
from meshtest import KnownFailure, Pipeline, ScenarioCase, TrainCase, register

L1 = ("cpu_level1",)


def soft_label_loss(logits, weights):
    import torch.nn.functional as F

    return -(F.log_softmax(logits, dim=-1) * weights).sum() / logits.shape[0]


def tp_head_sharded_logits(model, ctx):
    """``w1`` Colwise (its output gathered), ``w2`` (the head) Colwise with ``Shard(-1)`` logits
    kept a DTensor."""
    api = ctx.api
    return api.parallelize_module(model, ctx.mesh, {
        "w1": api.ColwiseParallel(output_layouts=api.Replicate()),
        "w2": api.ColwiseParallel(output_layouts=api.Shard(-1), use_local_output=False)})


def loss_parallel_soft_labels(model, inputs, target, loss_fn, ctx):
    """Forward, then the soft-label loss and its backward inside ``loss_parallel()``, the labels
    distributed ``Shard(-1)`` like the logits."""
    api = ctx.api
    labels = api.distribute_tensor(target, ctx.mesh, [api.Shard(-1)])
    with api.loss_parallel():
        loss = loss_fn(model(*inputs), labels)
        loss.backward()
    return loss


register(TrainCase(name="tp_loss_parallel_soft_label_log_softmax", model=mlp, data=regression, loss=soft_label_loss,
                   parallelize=tp_head_sharded_logits, train_step=loss_parallel_soft_labels, steps=2,
                   mesh_shape=(2,), mesh_dim_names=("tp",), tags=L1, capabilities=("tp", "dtensor"), layer=2,
                   requires=("tp.styles", "loss_parallel"),
                   known_failure=KnownFailure(
                       kind="mismatch", step="compare",
                       match=r"step 0 grads w\d\.",
                       signature="step 0 grads w1.bias values 32/32 @1cfe4ace abs 0.039 rel 2.2",
                       reason="loss_parallel() registers the identity as the backward of _log_softmax_backward_data, "
                              "correct only when nll_loss consumes the log-softmax; any other consumer gets the "
                              "identity Jacobian instead of I - softmax",
                       upstream="pytorch/pytorch#190746")))


def penalized_mlp(api):
    """An MLP whose forward also returns the gradient of its output's sum with respect to its input
    (``create_graph=True``), for a gradient-penalty loss."""
    nn, torch = api.nn, api.torch

    class Penalized(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp(api)

        def forward(self, x):
            x = x.detach().requires_grad_(True)
            out = self.net(x)
            (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
            return out, grad

    return Penalized()


def mse_with_gradient_penalty(output, target):
    out, grad = output
    return mse(out, target) + 0.1 * (grad ** 2).mean()


def fsdp_inner_and_root(model, ctx):
    ctx.api.fully_shard(model.net, mesh=ctx.mesh)
    return ctx.api.fully_shard(model, mesh=ctx.mesh)


register(TrainCase(name="fsdp2_gradient_penalty_double_backward", model=penalized_mlp, data=regression,
                   loss=mse_with_gradient_penalty, parallelize=fsdp_inner_and_root, steps=2, batch_split="dp",
                   mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1, capabilities=("fsdp",), layer=2,
                   requires=("fsdp2",),
                   known_failure=KnownFailure(
                       kind="raises", step="parallel", match=r"setStorage: .* out of bounds for storage of size 0",
                       reason="FSDP2 frees the unsharded parameter after the first backward; the second "
                              "backward of the gradient penalty needs it",
                       upstream="pytorch/pytorch#172543")))


def halve_boundary_gradients(api):
    """:func:`~cases.torch.training.models.stack` whose every block scales the gradient reaching
    its input by 0.5 (a tensor hook registered by a forward pre-hook: gradient scaling at a stage
    boundary), the same in the baseline."""
    model = stack(api)

    def pre_hook(module, args):
        if args[0].requires_grad:
            args[0].register_hook(lambda g: g * 0.5)

    for block in model.blocks.values():
        block.register_forward_pre_hook(pre_hook)
    return model


register(TrainCase(name="pp_boundary_tensor_hook_per_step", model=halve_boundary_gradients, data=regression, loss=mse,
                   pipeline=Pipeline(stack_stage, "1F1B"), steps=3, mesh_shape=(2,), mesh_dim_names=("pp",), tags=L1,
                   capabilities=("pp",), layer=2, requires=("pipelining",),
                   known_failure=KnownFailure(
                       kind="mismatch", step="compare",
                       match=r"step 1 grads blocks\.[01]\.|step 2 loss",
                       signature=(
                           "ranks 0 of 2: step 1 grads blocks.0.mlp.w1.bias values 32/32 @1cfe4ace abs 0.0016 rel 0.5"
                           " | ranks 1 of 2: step 2 loss values 1/1 @2d3fc530 abs 3e-05 rel 1.9e-05"),
                       reason="a non-first stage's input is its persistent receive buffer (made a leaf with "
                              "requires_grad_), so a tensor hook registered on it in one step stays for the next: "
                              "stage 0's gradients are halved once more each step (and the loss of the last stage "
                              "drifts from step 2)",
                       upstream="pytorch/pytorch#185331")))


def broadcast_dtensor_state_dict(ctx):
    api = ctx.api
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model = api.nn.Sequential(api.nn.Linear(16, 16), api.nn.Linear(16, 16))
    for layer in model:
        api.fully_shard(layer, mesh=ctx.mesh)
    api.fully_shard(model, mesh=ctx.mesh)
    ctx.step("set_model_state_dict")
    set_model_state_dict(model, model.state_dict(),
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


register(ScenarioCase(name="dcp_broadcast_from_rank0_dtensor_state_dict", fn=broadcast_dtensor_state_dict,
                      mesh_shape=(2,), mesh_dim_names=("dp",), tags=L1, capabilities=("dcp", "fsdp"), layer=1,
                      requires=("fsdp2", "dcp"), solo_launcher=True,
                      known_failure=KnownFailure(
                          kind="raises", step="set_model_state_dict",
                          match=r"c10d\.broadcast_\.default|Connection closed by peer",
                          reason="broadcast_from_rank0 broadcasts each value of the given state dict with "
                                 "c10d.broadcast_, which has no DTensor sharding strategy: rank 0 raises inside the "
                                 "collective the other ranks wait in",
                          upstream="pytorch/pytorch#164843")))
