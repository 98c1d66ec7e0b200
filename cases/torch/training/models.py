"""Small models and seeded data for the training cases (imported as ``cases.torch.training.models``).

Each builder takes the platform namespace ``api`` (``ctx.api``: torch's names) so that the
cases stay declarations of *what* to train. Sizes are tiny (dims 16-32, 8-row batches): the
point is the training semantics, not throughput.
"""


def mlp(api, dim=16, hidden=32):
    """``w1`` (dim → hidden), GELU, ``w2`` (hidden → dim): the TP Colwise/Rowwise pair."""
    nn = api.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden)
            self.w2 = nn.Linear(hidden, dim)

        def forward(self, x):
            return self.w2(api.F.gelu(self.w1(x)))

    return MLP()


def stack(api, layers=4, dim=16, hidden=32, noise=0.0):
    """``layers`` MLP blocks with residuals in ``blocks.<i>``, then ``head``: a model to cut
    into pipeline stages and to wrap per block (FSDP, activation checkpoint). With ``noise``,
    the forward first adds ``noise * randn(dim)`` drawn from the global RNG (see
    :func:`noisy_stack`)."""
    nn = api.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = mlp(api, dim, hidden)

        def forward(self, x):
            return x + self.mlp(x)

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleDict({str(i): Block() for i in range(layers)})
            self.head = nn.Linear(dim, dim)

        def forward(self, x):
            if noise:
                x = x + noise * api.torch.randn(x.shape[-1])
            for block in self.blocks.values():
                x = block(x)
            return self.head(x) if self.head is not None else x

    return Stack()


def stage_of(model, blocks, head):
    """The part of a :func:`stack` a pipeline stage runs: the same module with only ``blocks``
    (their names kept, so parameter FQNs match the whole model's) and the head if ``head``. The
    kept blocks are the model's own modules: several stages cut from one model share them."""
    import copy

    part = copy.copy(model)
    part._modules = dict(model._modules)
    part.blocks = type(model.blocks)({k: model.blocks[k] for k in blocks})
    part.head = model.head if head else None
    return part


def stack_stage(model, stage, num_stages):
    """Stage ``stage`` of ``num_stages`` of a :func:`stack` (a ``Pipeline.split``): an equal
    share of the blocks in order (:func:`stage_of`), the head on the last stage."""
    names = list(model.blocks)
    per = len(names) // num_stages
    return stage_of(model, names[stage * per:(stage + 1) * per], head=stage == num_stages - 1)


def deterministic_init(model, api):
    """Every parameter set to ``0.1 * sin(0.37 * (i + 1))`` over its global elements (plain or
    DTensor: the full values are laid out by the parameter's own placements), so that a model
    materialized from the meta device gets exactly the baseline's weights."""
    torch = api.torch
    with torch.no_grad():
        for k, p in enumerate(model.parameters()):
            full = 0.1 * torch.sin(0.37 * (torch.arange(p.numel(), dtype=torch.float32) + 1 + k)).reshape(p.shape)
            if isinstance(p, api.DTensor):
                full = api.distribute_tensor(full, p.device_mesh, p.placements)
            p.copy_(full)
    return model


def regression(i, api, rows=8, dim=16):
    """Micro-batch ``i``: ``(x, y)`` of ``rows`` rows, from a generator seeded with ``i``."""
    g = api.torch.Generator().manual_seed(1000 + i)
    x = api.torch.randn(rows, dim, generator=g)
    return x, api.torch.randn(rows, dim, generator=g)


def mse(out, target):
    return ((out - target) ** 2).mean()


def adam(params, api):
    return api.torch.optim.Adam(params, lr=1e-2)


def sgd_momentum(params, api):
    return api.torch.optim.SGD(params, lr=0.05, momentum=0.9)


def moe(api, dim=16, experts=2):
    """A top-1 mixture of experts: ``gate`` scores each row, the highest-scoring expert in
    ``experts.<e>`` transforms it, weighted by its gate probability, then ``head``."""
    nn, torch = api.nn, api.torch

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(dim, experts, bias=False)
            self.experts = nn.ModuleDict({str(e): nn.Linear(dim, dim) for e in range(experts)})
            self.head = nn.Linear(dim, dim)

        def route(self, x):
            probs = torch.softmax(self.gate(x), dim=-1)
            choice = probs.argmax(dim=-1)
            return choice, probs.gather(1, choice[:, None])

        def forward(self, x):
            choice, weight = self.route(x)
            out = torch.zeros_like(x)
            for e, expert in self.experts.items():
                mask = choice == int(e)
                out = out.index_put((mask,), expert(x[mask]))
            return self.head(out * weight)

    return MoE()


def tiny_lm(api, vocab=32, dim=16, heads=2):
    """Token embedding, one causal self-attention block (``attn.wq/wk/wv/wo``, heads of
    ``dim // heads``) with a residual, an MLP block, and an output projection to the vocabulary:
    the TP paths of a transformer (embedding, attention, MLP, logits). Shapes are inferred from
    the local projections, so a TP plan that shards heads runs the same code."""
    nn, F = api.nn, api.F
    head_dim = dim // heads

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk, self.wv = (nn.Linear(dim, dim) for _ in range(3))
            self.wo = nn.Linear(dim, dim)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (w(x).view(b, s, -1, head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            return self.wo(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.attn = Attention()
            self.mlp = mlp(api, dim, 2 * dim)
            self.logits = nn.Linear(dim, vocab)

        def forward(self, tokens):
            x = self.embed(tokens)
            x = x + self.attn(x)
            x = x + self.mlp(x)
            return self.logits(x)

    return LM()


def tokens(i, api, batch=2, seq=8, vocab=32):
    """Micro-batch ``i`` of token ids and next-token targets."""
    g = api.torch.Generator().manual_seed(3000 + i)
    t = api.torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def cross_entropy(logits, target):
    return logits.flatten(0, 1).log_softmax(-1).gather(1, target.flatten()[:, None]).neg().mean()


def noisy_stack(api):
    """A :func:`stack` whose forward first adds a small draw of the global RNG to its input
    (one ``randn(dim)`` per forward, the same on every rank, which are seeded alike): a model
    whose trajectory depends on the RNG state, so a resume that drops it diverges. Not for
    pipeline stages (each stage would draw)."""
    return stack(api, noise=0.05)


def decaying_lr(optimizer, api):
    """``LambdaLR`` with ``lr = base_lr / (1 + epoch)``: the rate is a function of the scheduler's
    own step count, so a resume that drops the scheduler's state restarts it at ``base_lr``.
    (A chainable scheduler such as ``StepLR`` multiplies the optimizer's current ``lr``, which
    the optimizer's state already restores: dropping its state changes nothing measurable.)"""
    return api.torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0 / (1 + epoch))


def attention(api, dim=16, causal=True):
    """Self-attention over the sequence dim of ``(batch, seq, dim)`` rows (causal unless
    ``causal=False``), then a projection."""
    nn, F = api.nn, api.F

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.out = nn.Linear(dim, dim)

        def forward(self, x):
            q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
            return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=causal).squeeze(1))

    return Attention()


def noncausal_attention(api):
    return attention(api, causal=False)


def sequences(i, api):
    g = api.torch.Generator().manual_seed(2000 + i)
    return api.torch.randn(2, 8, 16, generator=g), api.torch.randn(2, 8, 16, generator=g)


def init_stack(api):
    """A :func:`stack` initialized by :func:`deterministic_init` (the baseline of meta-device init)."""
    return deterministic_init(stack(api), api)
