"""The TP test plan, class A (A1–A12): the fail-closed behaviour of the TP ParallelStyle API.

Each case provokes one misuse and asserts the exception type and the key words of its message
(the plan's class-A table and the plan's fail-closed list), or, for the two warning paths (A5, A12), the warning
category and
message AND that the module was left exactly as it was (parameters still plain ``nn.Parameter``
with their original values, no forward hooks added). Cases that raise also check, where the
misuse happens at apply time, that the module was not half-parallelised.

Where torch 2.13 behaves differently from the TP plan (another exception type, a warning instead of
an error, no error at all), the case asserts torch's actual behaviour and its ``divergence`` names
both; the torch source that decides is cited in a comment (all under
``torch/distributed/tensor/``: ``parallel/api.py`` ``parallelize_module``, ``parallel/style.py``,
``_api.py`` ``distribute_tensor`` / ``distribute_module``).

No numerics are compared here, so there are no tolerances; values are compared bitwise
(``ctx.assert_equal``) only to prove that a rejected call left the weights untouched. No gradients.
All cases run on 2 ranks over a 1-D ``("tp",)`` mesh, except A2 which needs a 2-D mesh and uses
``(1, 2)`` with ``("dp", "tp")`` so it still runs on 2 ranks.
"""
import warnings

from meshtest import KnownFailure, ScenarioCase, register

L0 = ("cpu_level0", "cpu_level1", "npu_level1")
MESH2 = (2,)
TP = ("tp",)
MESH_1X2 = (1, 2)
DP_TP = ("dp", "tp")


# ---------------------------------------------------------------- helpers

def _expect_raises(ctx, exc_type, words, fn):
    """Call ``fn``; assert it raises exactly ``exc_type`` whose message contains every word
    (case-insensitive). Return the exception."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is checked below
        assert type(e) is exc_type, f"expected {exc_type.__name__}, got {type(e).__name__}: {e}"
        msg = str(e).lower()
        missing = [w for w in words if w.lower() not in msg]
        assert not missing, f"{exc_type.__name__} message lacks {missing}: {e}"
        ctx.note(f"{type(e).__name__}: {str(e)[:160]}")
        return e
    raise AssertionError(f"expected {exc_type.__name__} (message with {list(words)}), nothing was raised")


def _record_warnings(fn):
    """Run ``fn`` recording every warning; return ``(result, [warning, ...])``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, list(caught)


def _snapshot(module):
    """Parameters (name -> detached clone) and per-submodule hook counts of ``module``."""
    params = {n: p.detach().clone() for n, p in module.named_parameters()}
    hooks = {n: (len(m._forward_pre_hooks), len(m._forward_hooks)) for n, m in module.named_modules()}
    return params, hooks


def _assert_unchanged(ctx, module, snap, what):
    """``module`` still has plain parameters equal to ``snap`` and no new hooks."""
    api = ctx.api
    params, hooks = snap
    now = dict(module.named_parameters())
    assert sorted(now) == sorted(params), f"{what}: parameter names changed {sorted(params)} -> {sorted(now)}"
    for name, p in now.items():
        assert type(p) is api.nn.Parameter and not isinstance(p, api.DTensor), \
            f"{what}: parameter {name!r} became {type(p).__name__} ({type(p.data).__name__})"
        ctx.assert_equal(p.detach(), params[name], label=f"{what}: {name} unchanged")
    now_hooks = {n: (len(m._forward_pre_hooks), len(m._forward_hooks)) for n, m in module.named_modules()}
    assert now_hooks == hooks, f"{what}: forward hooks changed {hooks} -> {now_hooks}"


def _linear(ctx, in_f=8, out_f=8, seed=0):
    ctx.api.torch.manual_seed(seed)
    return ctx.api.nn.Linear(in_f, out_f)


def _seq(ctx, *mods):
    return ctx.api.nn.Sequential(*mods)


# ---------------------------------------------------------------- A1

def _a1_parallel_style_is_abstract(ctx):
    api = ctx.api
    ctx.step("instantiate")
    # torch: ParallelStyle(ABC) with @abstractmethod _apply (parallel/style.py); Python's ABC
    # machinery raises "Can't instantiate abstract class ParallelStyle ... abstract method _apply".
    _expect_raises(ctx, TypeError, ("abstract", "ParallelStyle"), lambda: api.ParallelStyle())
    ctx.step("concrete styles are subclasses")
    for name in ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                 "PrepareModuleOutput", "PrepareModuleInputOutput"):
        assert issubclass(getattr(api, name), api.ParallelStyle), f"{name} is not a ParallelStyle subclass"


register(ScenarioCase(
    name="tp_A1_parallel_style_is_abstract",
    fn=_a1_parallel_style_is_abstract,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A1",
))


# ---------------------------------------------------------------- A2

def _a2_colwise_rowwise_reject_2d_mesh(ctx):
    api = ctx.api
    mesh = ctx.mesh
    assert mesh.ndim == 2, f"expected the 2-D (dp, tp) mesh, got ndim={mesh.ndim}"
    # torch: parallelize_module (parallel/api.py) has no 1-D check; the ValueError comes from
    # distribute_tensor (_api.py): "`placements` must have the same length as `device_mesh.ndim`!"
    # when the style's partition_fn distributes the first parameter with a 1-element placement.
    for style_name in ("ColwiseParallel", "RowwiseParallel"):
        ctx.step(f"{style_name} on 2-D mesh")
        lin = _linear(ctx, 8, 8)
        snap = _snapshot(lin)
        _expect_raises(ctx, ValueError, ("placements", "device_mesh.ndim"),
                       lambda lin=lin, style=style_name: api.parallelize_module(lin, mesh, getattr(api, style)()))
        _assert_unchanged(ctx, lin, snap, f"{style_name} rejected on 2-D mesh")
    ctx.step("dict plan on 2-D mesh")
    model = _seq(ctx, _linear(ctx, 8, 8))
    snap = _snapshot(model)
    _expect_raises(ctx, ValueError, ("placements", "device_mesh.ndim"),
                   lambda: api.parallelize_module(model, mesh, {"0": api.ColwiseParallel()}))
    _assert_unchanged(ctx, model, snap, "dict plan rejected on 2-D mesh")
    ctx.step("the 1-D sub-mesh mesh['tp'] is accepted")
    lin = _linear(ctx, 8, 8)
    api.parallelize_module(lin, mesh["tp"], api.ColwiseParallel())
    assert isinstance(lin.weight, api.DTensor) and lin.weight.placements == (api.Shard(0),), \
        f"Colwise on mesh['tp'] gave {type(lin.weight).__name__} {getattr(lin.weight, 'placements', None)}"
    assert tuple(lin.weight.to_local().shape) == (8 // ctx.world_size, 8)


register(ScenarioCase(
    name="tp_A2_colwise_rowwise_reject_2d_mesh",
    fn=_a2_colwise_rowwise_reject_2d_mesh,
    mesh_shape=MESH_1X2, mesh_dim_names=DP_TP, tags=L0, requires=("tp.styles",), spec_id="A2",
    divergence=("seed: parallelize_module checks the mesh and raises ValueError 'Tensor Parallel only accepts "
                "a 1D DeviceMesh' hinting at device_mesh['tp']; torch 2.13: parallelize_module has no 1-D check, "
                "Colwise/Rowwise fail later in distribute_tensor with ValueError '`placements` must have the same "
                "length as `device_mesh.ndim`' (no hint at mesh['tp'])"),
))


def _a2_sequence_parallel_on_2d_mesh(ctx):
    api = ctx.api
    mesh = ctx.mesh
    assert mesh.ndim == 2, f"expected the 2-D (dp, tp) mesh, got ndim={mesh.ndim}"
    ctx.step("SequenceParallel on 2-D mesh")
    # the TP plan (parallelize_module's contract, the fail-closed list): a 2-D mesh must raise ValueError. torch 2.13
    # accepts it:
    # SequenceParallel._replicate_module_fn calls DTensor.from_local(param, mesh, [Replicate()])
    # (parallel/style.py), which never checks len(placements) == mesh.ndim, leaving parameters
    # that break DTensor's own invariant (see the known_failure reason).
    norm = api.nn.LayerNorm(8)
    snap = _snapshot(norm)
    _expect_raises(ctx, ValueError, ("1D",), lambda: api.parallelize_module(norm, mesh, api.SequenceParallel()))
    _assert_unchanged(ctx, norm, snap, "2-D mesh rejected")


register(ScenarioCase(
    name="tp_A2_sequence_parallel_rejects_2d_mesh",
    fn=_a2_sequence_parallel_on_2d_mesh,
    mesh_shape=MESH_1X2, mesh_dim_names=DP_TP, tags=L0, requires=("tp.styles",), spec_id="A2",
    known_failure=KnownFailure(
        kind="mismatch", step="SequenceParallel on 2-D mesh", match=r"expected ValueError .* nothing was raised",
        reason="parallelize_module(norm, <2-D mesh>, SequenceParallel()) raises nothing and turns the norm's "
               "parameters into DTensors with ONE placement on a 2-D mesh (from_local does not check), then shards "
               "the sequence over the first mesh axis (dp), not tp. parallelize_module's docstring still says it "
               "only accepts a 1-D DeviceMesh: the check that raised this ValueError was dropped",
        upstream="docs/torch-bugs.md#tp-2d-mesh-unchecked"),
))


def _a2_prepare_input_on_2d_mesh(ctx):
    api = ctx.api
    mesh = ctx.mesh
    assert mesh.ndim == 2, f"expected the 2-D (dp, tp) mesh, got ndim={mesh.ndim}"
    ctx.step("PrepareModuleInput on 2-D mesh")
    # the TP plan (parallelize_module's contract, the fail-closed list): ValueError. torch 2.13:
    # PrepareModuleInput._apply only registers a
    # pre-hook and nothing checks the mesh (see the known_failure reason).
    lin = _linear(ctx, 8, 8)
    snap = _snapshot(lin)
    _expect_raises(ctx, ValueError, ("1D",), lambda: api.parallelize_module(
        lin, mesh, api.PrepareModuleInput(input_layouts=api.Shard(0), desired_input_layouts=api.Replicate())))
    _assert_unchanged(ctx, lin, snap, "2-D mesh rejected")


register(ScenarioCase(
    name="tp_A2_prepare_module_input_rejects_2d_mesh",
    fn=_a2_prepare_input_on_2d_mesh,
    mesh_shape=MESH_1X2, mesh_dim_names=DP_TP, tags=L0, requires=("tp.styles",), spec_id="A2",
    known_failure=KnownFailure(
        kind="mismatch", step="PrepareModuleInput on 2-D mesh", match=r"expected ValueError .* nothing was raised",
        reason="parallelize_module(m, <2-D mesh>, PrepareModuleInput(Shard(0) -> Replicate())) raises nothing; on "
               "forward its hook hands the module a DTensor with ONE placement on the 2-D mesh, breaking DTensor's "
               "invariant of one placement per mesh dim. The docstring still says 1-D only: the check was dropped",
        upstream="docs/torch-bugs.md#tp-2d-mesh-unchecked"),
))


# ---------------------------------------------------------------- A3

def _a3_list_plan(ctx):
    api = ctx.api
    ctx.step("list plan")
    lin = _linear(ctx)
    snap = _snapshot(lin)
    # torch: parallelize_module's final else branch (parallel/api.py).
    _expect_raises(ctx, TypeError, ("ParallelStyle", "list"),
                   lambda: api.parallelize_module(lin, ctx.mesh, [api.ColwiseParallel()]))
    _assert_unchanged(ctx, lin, snap, "list plan rejected")


register(ScenarioCase(
    name="tp_A3_list_plan_type_error",
    fn=_a3_list_plan,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A3",
))


def _a3_dict_value_not_style(ctx):
    api = ctx.api
    for bad in ("colwise", 3):
        ctx.step(f"dict value {bad!r}")
        model = _seq(ctx, _linear(ctx))
        snap = _snapshot(model)
        # torch: the matched path recurses with the value as plan and hits the else branch.
        _expect_raises(ctx, TypeError, ("ParallelStyle", type(bad).__name__),
                       lambda model=model, bad=bad: api.parallelize_module(model, ctx.mesh, {"0": bad}))
        _assert_unchanged(ctx, model, snap, f"dict value {bad!r} rejected")


register(ScenarioCase(
    name="tp_A3_dict_value_not_style_type_error",
    fn=_a3_dict_value_not_style,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A3",
))


def _a3_dict_value_not_style_unmatched_key(ctx):
    api = ctx.api
    ctx.step("dict value not a style, key matches nothing")
    model = _seq(ctx, _linear(ctx))
    snap = _snapshot(model)
    # torch validates a dict value only when its key resolves; an unresolved key warns and skips
    # the entry before the value is looked at (parallel/api.py).
    _, caught = _record_warnings(lambda: api.parallelize_module(model, ctx.mesh, {"missing": 3}))
    msgs = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any("could not be resolved" in m and "missing" in m for m in msgs), \
        f"expected the unresolved-key UserWarning, got {[(w.category.__name__, str(w.message)) for w in caught]}"
    _assert_unchanged(ctx, model, snap, "unmatched non-style entry")


register(ScenarioCase(
    name="tp_A3_dict_value_not_style_unmatched_key",
    fn=_a3_dict_value_not_style_unmatched_key,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A3",
    divergence=("seed: a dict plan value that is not a ParallelStyle raises TypeError; torch 2.13: only when its "
                "key resolves - {'missing': 3} gives a UserWarning 'could not be resolved' and no error"),
))


def _a3_dict_non_str_key(ctx):
    api = ctx.api
    ctx.step("dict key 0 (int)")
    model = _seq(ctx, _linear(ctx))
    snap = _snapshot(model)
    # torch: parallelize_module calls module_path.split(".") without checking the key type.
    _expect_raises(ctx, AttributeError, ("int", "split"),
                   lambda: api.parallelize_module(model, ctx.mesh, {0: api.ColwiseParallel()}))
    _assert_unchanged(ctx, model, snap, "int key rejected")


register(ScenarioCase(
    name="tp_A3_dict_non_str_key",
    fn=_a3_dict_non_str_key,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A3",
    divergence=("seed: a plan that is not dict[str, ParallelStyle] raises TypeError; torch 2.13: an int key "
                "raises AttributeError \"'int' object has no attribute 'split'\""),
))


# ---------------------------------------------------------------- A4

def _a4_empty_fqn(ctx):
    api = ctx.api
    ctx.step("plan {'': ColwiseParallel()} on a Linear")
    # torch: parallel/api.py treats the key "" as a shortcut for the current module.
    lin = _linear(ctx, 8, 8)
    full = lin.weight.detach().clone()
    _, caught = _record_warnings(lambda: api.parallelize_module(lin, ctx.mesh, {"": api.ColwiseParallel()}))
    assert not caught, f"unexpected warnings {[str(w.message) for w in caught]}"
    assert isinstance(lin.weight, api.DTensor) and lin.weight.placements == (api.Shard(0),), \
        f"'' did not apply Colwise to the root: {type(lin.weight).__name__}"
    ctx.assert_equal(lin.weight.to_local(), full.chunk(ctx.world_size, 0)[ctx.rank], label="root weight shard")
    ctx.step("plan {'': ColwiseParallel()} on a Sequential")
    model = _seq(ctx, _linear(ctx))
    snap = _snapshot(model)
    # the root Sequential is no Linear, so the style itself refuses it
    _expect_raises(ctx, NotImplementedError, ("Linear", "Embedding"),
                   lambda: api.parallelize_module(model, ctx.mesh, {"": api.ColwiseParallel()}))
    _assert_unchanged(ctx, model, snap, "'' on Sequential")


register(ScenarioCase(
    name="tp_A4_empty_fqn_applies_to_root",
    fn=_a4_empty_fqn,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A4",
    divergence=("seed: plan key '' raises ValueError; torch 2.13: '' means the root module - the style is "
                "applied to it (a Linear root is sharded, a Sequential root gets the style's NotImplementedError)"),
))


def _a4_double_dot_fqn(ctx):
    api = ctx.api
    ctx.step("plan {'0..0': ColwiseParallel()}")
    model = _seq(ctx, _seq(ctx, _linear(ctx)))
    snap = _snapshot(model)
    # torch: "0" matches, the rest ".0" is recursed into; its first token "" matches no child, so
    # it warns "could not be resolved" and skips the entry (parallel/api.py).
    _, caught = _record_warnings(lambda: api.parallelize_module(model, ctx.mesh, {"0..0": api.ColwiseParallel()}))
    msgs = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any("could not be resolved" in m for m in msgs), \
        f"expected a 'could not be resolved' UserWarning, got {[(w.category.__name__, str(w.message)) for w in caught]}"
    _assert_unchanged(ctx, model, snap, "'0..0' skipped")


register(ScenarioCase(
    name="tp_A4_double_dot_fqn_warns_and_skips",
    fn=_a4_double_dot_fqn,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A4",
    divergence=("seed: plan key 'a..b' raises ValueError; torch 2.13: UserWarning 'Parallelize plan key ... could "
                "not be resolved: no submodule matching token ''', entry skipped, module unchanged"),
))


# ---------------------------------------------------------------- A5

def _a5_unmatched_path(ctx):
    api = ctx.api
    ctx.step("plan with only an unmatched path")
    model = _seq(ctx, _linear(ctx, seed=0), _linear(ctx, seed=1))
    snap = _snapshot(model)
    ret, caught = _record_warnings(lambda: api.parallelize_module(model, ctx.mesh,
                                                                  {"nope.proj": api.ColwiseParallel()}))
    assert ret is model, "parallelize_module did not return the module"
    hits = [w for w in caught if issubclass(w.category, UserWarning) and "nope.proj" in str(w.message)
            and "could not be resolved" in str(w.message)]
    seen = [(w.category.__name__, str(w.message)) for w in caught]
    assert len(hits) == 1, f"expected one UserWarning naming 'nope.proj', got {seen}"
    ctx.note(f"UserWarning: {str(hits[0].message)[:120]}")
    _assert_unchanged(ctx, model, snap, "unmatched plan")
    ctx.step("unmatched path next to a matched one")
    _, caught = _record_warnings(lambda: api.parallelize_module(
        model, ctx.mesh, {"nope": api.ColwiseParallel(), "1": api.ColwiseParallel()}))
    assert any("nope" in str(w.message) for w in caught), "no warning for the unmatched key"
    assert isinstance(model[1].weight, api.DTensor), "the matched entry after an unmatched one was not applied"
    assert not isinstance(model[0].weight, api.DTensor), "submodule '0' was changed by an unmatched key"


register(ScenarioCase(
    name="tp_A5_unmatched_path_warns_module_unchanged",
    fn=_a5_unmatched_path,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A5",
))


# ---------------------------------------------------------------- A6

def _a6_rejects(ctx, style_name, kind):
    """Colwise/Rowwise applied to a LayerNorm, a ReLU or a custom module (holding a Linear and a
    weight of its own) raises NotImplementedError naming Linear and Embedding; module unchanged."""
    api = ctx.api
    nn = api.nn
    api.torch.manual_seed(0)
    if kind == "layernorm":
        mod = nn.LayerNorm(8)
    elif kind == "relu":
        mod = nn.ReLU()
    else:
        class Custom(nn.Module):  # looks like a linear layer, but is not an nn.Linear
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(api.torch.randn(8, 8))
                self.inner = nn.Linear(8, 8)

            def forward(self, x):
                return self.inner(x @ self.weight.t())

        mod = Custom()
    ctx.step(f"{style_name} on {kind}")
    snap = _snapshot(mod)
    # torch: ColwiseParallel._apply / RowwiseParallel._apply (parallel/style.py) check
    # isinstance(nn.Linear / nn.Embedding) before touching the module. Message:
    # "<Style> currently only support nn.Linear and nn.Embedding!"
    _expect_raises(ctx, NotImplementedError, (style_name, "only support", "Linear", "Embedding"),
                   lambda: api.parallelize_module(mod, ctx.mesh, getattr(api, style_name)()))
    _assert_unchanged(ctx, mod, snap, f"{style_name} rejected {kind}")
    if kind == "custom":
        ctx.step(f"{style_name} via dict on the custom module's own path")
        model = _seq(ctx, mod)
        _expect_raises(ctx, NotImplementedError, ("Linear", "Embedding"),
                       lambda: api.parallelize_module(model, ctx.mesh, {"0": getattr(api, style_name)()}))
        _assert_unchanged(ctx, mod, snap, f"{style_name} rejected {kind} via dict")


def _a6_colwise_layernorm(ctx):
    _a6_rejects(ctx, "ColwiseParallel", "layernorm")


def _a6_colwise_relu(ctx):
    _a6_rejects(ctx, "ColwiseParallel", "relu")


def _a6_colwise_custom(ctx):
    _a6_rejects(ctx, "ColwiseParallel", "custom")


def _a6_rowwise_layernorm(ctx):
    _a6_rejects(ctx, "RowwiseParallel", "layernorm")


def _a6_rowwise_relu(ctx):
    _a6_rejects(ctx, "RowwiseParallel", "relu")


def _a6_rowwise_custom(ctx):
    _a6_rejects(ctx, "RowwiseParallel", "custom")


register(ScenarioCase(
    name="tp_A6_colwise_rejects_layernorm", fn=_a6_colwise_layernorm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A6",
))
register(ScenarioCase(
    name="tp_A6_colwise_rejects_relu", fn=_a6_colwise_relu,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A6",
))
register(ScenarioCase(
    name="tp_A6_colwise_rejects_custom_module", fn=_a6_colwise_custom,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A6",
))
register(ScenarioCase(
    name="tp_A6_rowwise_rejects_layernorm", fn=_a6_rowwise_layernorm,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A6",
))
register(ScenarioCase(
    name="tp_A6_rowwise_rejects_relu", fn=_a6_rowwise_relu,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A6",
))
register(ScenarioCase(
    name="tp_A6_rowwise_rejects_custom_module", fn=_a6_rowwise_custom,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A6",
))


# ---------------------------------------------------------------- A7

def _a7_prepare_layout_lengths(ctx):
    api = ctx.api
    S, R = api.Shard, api.Replicate
    # torch: PrepareModuleInput.__init__ / PrepareModuleOutput.__init__ (parallel/style.py).
    ctx.step("PrepareModuleInput positional lengths 2 vs 1")
    _expect_raises(ctx, AssertionError, ("same length",),
                   lambda: api.PrepareModuleInput(input_layouts=(S(0), R()), desired_input_layouts=(R(),)))
    ctx.step("PrepareModuleInput positional lengths 1 vs 2")
    _expect_raises(ctx, AssertionError, ("same length",),
                   lambda: api.PrepareModuleInput(input_layouts=S(0), desired_input_layouts=(R(), None)))
    ctx.step("PrepareModuleInput kwarg lengths 2 vs 1")
    _expect_raises(ctx, AssertionError, ("same length",),
                   lambda: api.PrepareModuleInput(input_kwarg_layouts={"a": S(0), "b": S(0)},
                                                  desired_input_kwarg_layouts={"a": R()}))
    ctx.step("PrepareModuleInput input_layouts without desired_input_layouts")
    _expect_raises(ctx, AssertionError, ("desired",), lambda: api.PrepareModuleInput(input_layouts=(S(0),)))
    ctx.step("PrepareModuleOutput lengths 2 vs 1")
    _expect_raises(ctx, AssertionError, ("same length",),
                   lambda: api.PrepareModuleOutput(output_layouts=(S(0), R()), desired_output_layouts=(R(),)))
    ctx.step("PrepareModuleInputOutput lengths 2 vs 1")
    _expect_raises(ctx, AssertionError, ("same length",),
                   lambda: api.PrepareModuleInputOutput(input_layouts=(S(0), R()), desired_input_layouts=(R(),),
                                                        output_layouts=R(), desired_output_layouts=R()))
    ctx.step("equal lengths construct")
    style = api.PrepareModuleInput(input_layouts=(S(0), None), desired_input_layouts=(R(), None))
    assert style.input_layouts == (S(0), None) and style.desired_input_layouts == (R(), None)


register(ScenarioCase(
    name="tp_A7_prepare_layout_length_mismatch",
    fn=_a7_prepare_layout_lengths,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A7",
))


# ---------------------------------------------------------------- A8

def _a8_prepare_input_arity(ctx):
    api = ctx.api
    torch = api.torch

    class TwoInputs(api.nn.Module):
        def forward(self, a, b):
            return a, b  # echo: lets the case see what the pre-hook handed to forward

    a = torch.ones(4, 8)
    b = torch.ones(4, 8)
    for layouts in (api.Replicate(), (api.Replicate(),)):
        ctx.step(f"forward(a, b) with layouts {layouts}")
        mod = TwoInputs()
        api.parallelize_module(mod, ctx.mesh, api.PrepareModuleInput(input_layouts=layouts,
                                                                    desired_input_layouts=layouts))
        # torch: PrepareModuleInput._prepare_input_fn (parallel/style.py) at forward time.
        _expect_raises(ctx, ValueError, ("inputs", "input_layouts", "same length"), lambda mod=mod: mod(a, b))
    ctx.step("matching arity runs (positive control)")
    mod = TwoInputs()
    api.parallelize_module(mod, ctx.mesh, api.PrepareModuleInput(input_layouts=(api.Replicate(), None),
                                                                desired_input_layouts=(api.Replicate(), None)))
    out_a, out_b = mod(a, b)
    assert isinstance(out_a, api.DTensor) and out_a.placements == (api.Replicate(),), \
        f"first input became {type(out_a).__name__}"
    assert type(out_b) is torch.Tensor and out_b is b, "the None slot did not pass the second input through"


register(ScenarioCase(
    name="tp_A8_prepare_input_arity_mismatch",
    fn=_a8_prepare_input_arity,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A8",
))


# ---------------------------------------------------------------- A9

def _a9_sequence_parallel_non_tensor(ctx):
    api = ctx.api
    api.torch.manual_seed(0)
    norm = api.nn.LayerNorm(8)
    api.parallelize_module(norm, ctx.mesh, api.SequenceParallel())
    # torch: SequenceParallel._prepare_input_fn (parallel/style.py):
    # "expecting input of <mod> to be a torch.Tensor or DTensor, but got <x>"
    for bad in ([1.0] * 8, 3):
        ctx.step(f"forward({type(bad).__name__})")
        _expect_raises(ctx, ValueError, ("torch.Tensor or DTensor", "but got"), lambda bad=bad: norm(bad))


register(ScenarioCase(
    name="tp_A9_sequence_parallel_non_tensor_input",
    fn=_a9_sequence_parallel_non_tensor,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A9",
))


# ---------------------------------------------------------------- A10
# The Rowwise output hook only sees a non-DTensor on the Linear path when something between the
# DTensor matmul and the hook unwraps the result. Two real ways: an nn.Linear subclass whose
# forward returns the local tensor (isinstance(nn.Linear) still holds, so Rowwise accepts it), and
# a forward hook the user registered on the Linear BEFORE parallelize_module (hooks run in
# registration order, so it runs before the style's output hook).
# torch: RowwiseParallel._prepare_output_fn (parallel/style.py) reads outputs.placements without
# a type check, so a plain tensor gives AttributeError, not the TP plan's TypeError.

_A10_DIVERGENCE = ("seed: RowwiseParallel's output hook raises TypeError when a Linear yields a non-DTensor "
                   "output; torch 2.13: AttributeError \"'Tensor' object has no attribute 'placements'\" "
                   "(_prepare_output_fn has no type check)")


def _a10_run(ctx, lin):
    api = ctx.api
    api.parallelize_module(lin, ctx.mesh, api.RowwiseParallel())
    assert lin.weight.placements == (api.Shard(1),)
    x_local = api.torch.ones(2, 8 // ctx.world_size)  # Rowwise input: Shard(-1) local chunk
    ctx.step("forward")
    _expect_raises(ctx, AttributeError, ("Tensor", "placements"), lambda: lin(x_local))


def _a10_subclass(ctx):
    api = ctx.api
    nn = api.nn

    class LocalOutLinear(nn.Linear):
        def forward(self, x):
            out = super().forward(x)
            assert isinstance(out, api.DTensor), "Linear with DTensor weight did not return a DTensor"
            return out.to_local()  # hands the Rowwise hook a plain (Partial-valued) tensor

    api.torch.manual_seed(0)
    ctx.step("apply")
    _a10_run(ctx, LocalOutLinear(8, 4))


def _a10_prior_hook(ctx):
    api = ctx.api
    lin = _linear(ctx, 8, 4)
    lin.register_forward_hook(lambda m, inputs, out: out.to_local() if isinstance(out, api.DTensor) else out)
    ctx.step("apply")
    _a10_run(ctx, lin)


register(ScenarioCase(
    name="tp_A10_rowwise_linear_subclass_local_output",
    fn=_a10_subclass,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A10",
    divergence=_A10_DIVERGENCE,
))
register(ScenarioCase(
    name="tp_A10_rowwise_linear_prior_hook_local_output",
    fn=_a10_prior_hook,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A10",
    divergence=_A10_DIVERGENCE,
))


# ---------------------------------------------------------------- A11

def _a11_colwise_twice(ctx):
    api = ctx.api
    lin = _linear(ctx, 8, 8)
    full = lin.weight.detach().clone()
    ctx.step("first ColwiseParallel")
    api.parallelize_module(lin, ctx.mesh, api.ColwiseParallel())
    weight_before = lin.weight
    hooks_before = (len(lin._forward_pre_hooks), len(lin._forward_hooks))
    for style_name in ("ColwiseParallel", "RowwiseParallel", "SequenceParallel"):
        ctx.step(f"second distribute_module ({style_name})")
        # torch: distribute_module (_api.py) checks module._distribute_module_applied first.
        _expect_raises(ctx, RuntimeError, ("distribute_module", "once"),
                       lambda lin=lin, style=style_name: api.parallelize_module(lin, ctx.mesh, getattr(api, style)()))
    ctx.step("first sharding intact")
    assert lin.weight is weight_before, "the weight parameter was replaced by the rejected call"
    assert lin.weight.placements == (api.Shard(0),)
    ctx.assert_equal(lin.weight.to_local(), full.chunk(ctx.world_size, 0)[ctx.rank], label="weight shard")
    assert (len(lin._forward_pre_hooks), len(lin._forward_hooks)) == hooks_before, "hooks were added"


register(ScenarioCase(
    name="tp_A11_colwise_twice_runtime_error",
    fn=_a11_colwise_twice,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A11",
))


# ---------------------------------------------------------------- A12

def _a12_none_plan(ctx):
    api = ctx.api
    ctx.step("parallelize_plan=None")
    model = _seq(ctx, _linear(ctx, seed=0), _linear(ctx, seed=1))
    snap = _snapshot(model)
    ret, caught = _record_warnings(lambda: api.parallelize_module(model, ctx.mesh, None))
    assert ret is model, "parallelize_module(plan=None) did not return the same module"
    hits = [w for w in caught if issubclass(w.category, UserWarning) and "parallelize_plan" in str(w.message)]
    seen = [(w.category.__name__, str(w.message)) for w in caught]
    assert len(hits) == 1, f"expected one UserWarning about parallelize_plan, got {seen}"
    ctx.note(f"UserWarning: {hits[0].message}")
    _assert_unchanged(ctx, model, snap, "plan=None")
    ctx.step("default plan argument")
    ret, caught = _record_warnings(lambda: api.parallelize_module(model, ctx.mesh))
    assert ret is model and any("parallelize_plan" in str(w.message) for w in caught)
    _assert_unchanged(ctx, model, snap, "plan omitted")


register(ScenarioCase(
    name="tp_A12_none_plan_warns_returns_module",
    fn=_a12_none_plan,
    mesh_shape=MESH2, mesh_dim_names=TP, tags=L0, requires=("tp.styles",), spec_id="A12",
))
