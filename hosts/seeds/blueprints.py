"""Blueprint registry: the 16 seed architectures, keyed by (topology, name) (BEHAVIOUR §4).

Every blueprint maps (B, C, H, W) (cnn) or (B, T, D) (transformer) to the same shape. Layers
without an explicit init rule keep PyTorch defaults; the zero-init ones are exact identities at init.
Two CNN blueprints are initialised from the host (`from_host`): `copy_block` (depth) and `widen` (width) copy
the host block next to their slot and cancel it in pairs, so the network computes exactly what it did before
the germination while every new weight gets a gradient at the first step (BEHAVIOUR §4.5).
Every ReLU that follows a convolution or a GroupNorm works in place: neither reads its output in the
backward pass, so autograd allows it and it saves one pass over the activation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from esper_fx.contracts.blueprints import TOPOLOGIES
from hosts.layout import LN_EPS, spatial_mean

_GROUP_CANDIDATES = (32, 16, 8, 4, 2, 1)
_MIN_CHANNELS_PER_GROUP = 16


def num_groups(channels: int) -> int:
    """GroupNorm groups (BEHAVIOUR §4.2): the first g with C % g == 0 and C/g >= 16, else the first divisor, else 1."""
    for g in _GROUP_CANDIDATES:
        if channels % g == 0 and channels // g >= _MIN_CHANNELS_PER_GROUP:
            return g
    for g in _GROUP_CANDIDATES:
        if channels % g == 0:
            return g
    return 1


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups(channels), channels)


# ------------------------------------------------------------------------------------------
# CNN blueprints (BEHAVIOUR §4.3)
# ------------------------------------------------------------------------------------------


class SeedConvBlock(nn.Sequential):
    """Conv3x3(C, C, pad 1, no bias) -> GroupNorm -> ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__(nn.Conv2d(channels, channels, 3, padding=1, bias=False), _group_norm(channels),
                         nn.ReLU(inplace=True))


class Residual(nn.Module):
    """x + body(x)."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ScaledNorm(nn.Module):
    """x + tanh(s)·(norm(x) − x) with a learnable scalar s = 1.0 (not an identity at init)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.scale) * (self.norm(x) - x)


class ChannelAttention(nn.Module):
    """Squeeze-excitation: x · σ(FC2(ReLU(FC1(GAP(x))))), bias-free FCs C -> max(1, C//4) -> C."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        reduced = max(1, channels // 4)
        self.fc1 = nn.Linear(channels, reduced, bias=False)
        self.fc2 = nn.Linear(reduced, channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.sigmoid(self.fc2(F.relu(self.fc1(spatial_mean(x)))))
        return x * scale[:, :, None, None]


def _cnn_noop(c: int) -> nn.Module:
    return nn.Identity()


def _cnn_norm(c: int) -> nn.Module:
    return ScaledNorm(_group_norm(c))


def _cnn_attention(c: int) -> nn.Module:
    return ChannelAttention(c)


def _cnn_depthwise(c: int) -> nn.Module:
    return Residual(
        nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False),
            nn.Conv2d(c, c, 1, bias=False),
            _group_norm(c),
            nn.ReLU(inplace=True),
        )
    )


def _cnn_bottleneck(c: int) -> nn.Module:
    b = max(8, c // 4)
    up = nn.Conv2d(b, c, 1, bias=False)
    nn.init.zeros_(up.weight)
    return Residual(
        nn.Sequential(
            nn.Conv2d(c, b, 1, bias=False),
            nn.ReLU(inplace=True),
            nn.Conv2d(b, b, 3, padding=1, bias=False),
            nn.ReLU(inplace=True),
            up,
            _group_norm(c),
        )
    )


def _cnn_conv_small(c: int) -> nn.Module:
    conv = nn.Conv2d(c, c, 1, bias=False)
    nn.init.zeros_(conv.weight)
    return Residual(nn.Sequential(conv, _group_norm(c), nn.ReLU(inplace=True)))


def _cnn_conv_light(c: int) -> nn.Module:
    return Residual(SeedConvBlock(c))


def _cnn_conv_heavy(c: int) -> nn.Module:
    return Residual(nn.Sequential(SeedConvBlock(c), SeedConvBlock(c)))


# ------------------------------------------------------------------------------------------
# CNN blueprints initialised from the host (BEHAVIOUR §4.5)
# ------------------------------------------------------------------------------------------


class CopiedConv(nn.Sequential):
    """Conv3x3(C, C', pad 1, no bias) -> BatchNorm2d -> ReLU: the layout of a host block, so one can be copied."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True))


def _copyable(source: nn.Module | None, channels: int) -> bool:
    """`source` is a host block (3×3 conv without bias, then a batch norm) mapping `channels` to `channels`."""
    if source is None or len(source) < 2:
        return False
    conv, norm = source[0], source[1]
    return (isinstance(conv, nn.Conv2d) and isinstance(norm, nn.BatchNorm2d) and conv.bias is None
            and tuple(conv.kernel_size) == (3, 3) and conv.in_channels == channels == conv.out_channels)


@torch.no_grad()
def _copy_block(target: CopiedConv, source: nn.Module, repeat: int = 1) -> None:
    """`target`'s conv and norm (weights and running statistics) from `source`'s, its output channels the
    source's `repeat` times over."""
    conv, norm = source[0], source[1]
    target[0].weight.copy_(conv.weight.repeat(repeat, 1, 1, 1))
    for name in ("weight", "bias", "running_mean", "running_var"):
        getattr(target[1], name).copy_(getattr(norm, name).repeat(repeat))
    target[1].num_batches_tracked.copy_(norm.num_batches_tracked)


class CancellingPair(nn.Module):
    """`copy_block` (depth): x + a(x) − b(x), where a and b start as two copies of the neighbouring host block.

    At germination a(x) = b(x) exactly, so the network's function is unchanged (bit for bit). The gradients
    into a and b are equal and opposite and not zero, so from its first step the new block moves away from
    zero: a new layer of the host's own shape that starts where the trained host is (not at a random point)."""

    def __init__(self, channels: int, source: nn.Module | None = None) -> None:
        super().__init__()
        self.a, self.b = CopiedConv(channels, channels), CopiedConv(channels, channels)
        if _copyable(source, channels):
            _copy_block(self.a, source)
        self.b.load_state_dict(self.a.state_dict())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.a(x) - self.b(x))  # the difference first: exactly 0 at germination

    def copied_from(self, source: nn.Module) -> list[tuple[nn.Parameter, nn.Parameter, int]]:
        """(seed parameter, the host parameter it was copied from, repeats) per copied parameter."""
        pairs = []
        for half in (self.a, self.b):
            pairs += [(half[0].weight, source[0].weight, 1), (half[1].weight, source[1].weight, 1),
                      (half[1].bias, source[1].bias, 1)]
        return pairs


class SplitWidening(nn.Module):
    """`widen` (width): x + P(ReLU(BN(K x))), K's 2C channels the neighbouring host block's C channels twice and
    the 1×1 projection P = [I, −I] splitting each duplicated pair into cancelling halves.

    Each new channel is a duplicate of a host channel, and the two copies' outgoing weights cancel: at
    germination the output is x exactly, yet K, the norm and P all get non-zero gradients at the first step
    (P is trained, so the widened layer learns how to mix its channels back into the host's)."""

    def __init__(self, channels: int, source: nn.Module | None = None) -> None:
        super().__init__()
        self.expand = CopiedConv(channels, 2 * channels)
        self.project = nn.Conv2d(2 * channels, channels, 1, bias=False)
        with torch.no_grad():
            if _copyable(source, channels):
                _copy_block(self.expand, source, repeat=2)
            else:  # no host block to copy: a fresh conv, duplicated so that the pairs still cancel
                half = CopiedConv(channels, channels)
                _copy_block(self.expand, half, repeat=2)
            eye = torch.eye(channels).reshape(channels, channels, 1, 1)
            self.project.weight.copy_(torch.cat([eye, -eye], dim=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.expand(x))

    def copied_from(self, source: nn.Module) -> list[tuple[nn.Parameter, nn.Parameter, int]]:
        e = self.expand
        return [(e[0].weight, source[0].weight, 2), (e[1].weight, source[1].weight, 2), (e[1].bias, source[1].bias, 2)]


def _cnn_copy_block(c: int, source: nn.Module | None = None) -> nn.Module:
    return CancellingPair(c, source)


def _cnn_widen(c: int, source: nn.Module | None = None) -> nn.Module:
    return SplitWidening(c, source)


def carried_state(module: nn.Module, source: nn.Module | None, state_of) -> dict[nn.Parameter, torch.Tensor]:
    """The optimiser state a host-initialised seed may carry over from the host: seed parameter -> the
    momentum buffer of the host parameter it was copied from (repeated as its channels were), for every one
    that `state_of(host parameter)` has. {} for any other seed, or without a source block."""
    if source is None or not hasattr(module, "copied_from") or not _copyable(source, source[0].in_channels):
        return {}
    out = {}
    for mine, theirs, repeat in module.copied_from(source):
        buffer = state_of(theirs)
        if buffer is not None and buffer.shape[0] * repeat == mine.shape[0]:
            out[mine] = buffer.repeat(repeat, *([1] * (buffer.dim() - 1))).clone()
    return out


# ------------------------------------------------------------------------------------------
# Transformer blueprints (BEHAVIOUR §4.4)
# ------------------------------------------------------------------------------------------


class LowRank(nn.Module):
    """x + up(down(x)), bias-free, up initialised to zero."""

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=False)
        nn.init.zeros_(self.up.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(self.down(x))


class SeedSelfAttention(nn.Module):
    """x + proj(causal SDPA over n_head heads of qkv(x)); no dropout; proj initialised to zero."""

    def __init__(self, dim: int, n_head: int = 4) -> None:
        super().__init__()
        if dim % n_head != 0:
            raise ValueError(f"attention blueprint needs dim % {n_head} == 0 (got dim={dim})")
        self.n_head = n_head
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in self.qkv(x).split(d, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class SeedMLP(nn.Module):
    """x + fc2(GELU(fc1(x))) with the given expansion; fc2 initialised to zero."""

    def __init__(self, dim: int, expansion: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, expansion * dim)
        self.fc2 = nn.Linear(expansion * dim, dim)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


def _tf_noop(d: int) -> nn.Module:
    return nn.Identity()


def _tf_norm(d: int) -> nn.Module:
    return ScaledNorm(nn.LayerNorm(d, eps=LN_EPS))


def _tf_lora(d: int, rank: int = 8) -> nn.Module:
    return LowRank(d, rank)


def _tf_lora_large(d: int, rank: int = 32) -> nn.Module:
    return LowRank(d, rank)


def _tf_attention(d: int, n_head: int = 4) -> nn.Module:
    return SeedSelfAttention(d, n_head)


def _tf_mlp_small(d: int, expansion: int = 2) -> nn.Module:
    return SeedMLP(d, expansion)


def _tf_mlp(d: int, expansion: int = 4) -> nn.Module:
    return SeedMLP(d, expansion)


# ------------------------------------------------------------------------------------------
# Registry (BEHAVIOUR §4.1)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlueprintSpec:
    topology: str
    name: str
    factory: Callable[..., nn.Module]
    param_estimate: int  # stale reference numbers, used only to order list_for_topology
    param_formula: Callable[[int], int]  # exact trainable-parameter count at default kwargs
    identity_at_init: bool
    description: str
    from_host: bool = False  # initialised from the host block next to its slot (`create(..., source=block)`)

    def create(self, dim: int, source: nn.Module | None = None, **kw) -> nn.Module:
        return self.factory(dim, source=source, **kw) if self.from_host else self.factory(dim, **kw)


def _bottleneck_params(c: int) -> int:
    b = max(8, c // 4)
    return 2 * c * b + 9 * b * b + 2 * c


_SPECS = (
    # cnn
    ("cnn", "noop", _cnn_noop, 0, lambda c: 0, True, "x"),
    ("cnn", "norm", _cnn_norm, 100, lambda c: 2 * c + 1, False, "x + tanh(s)·(GN(x) − x)"),
    ("cnn", "attention", _cnn_attention, 2000, lambda c: 2 * c * max(1, c // 4), False, "squeeze-excitation"),
    ("cnn", "depthwise", _cnn_depthwise, 4800, lambda c: c * c + 11 * c, False, "x + ReLU(GN(pw(dw(x))))"),
    ("cnn", "bottleneck", _cnn_bottleneck, 12000, _bottleneck_params, True, "x + GN(up(ReLU(conv(ReLU(down(x))))))"),
    ("cnn", "conv_small", _cnn_conv_small, 18000, lambda c: c * c + 2 * c, True, "x + ReLU(GN(conv1x1(x)))"),
    ("cnn", "conv_light", _cnn_conv_light, 37000, lambda c: 9 * c * c + 2 * c, False, "x + SeedConvBlock(x)"),
    ("cnn", "conv_heavy", _cnn_conv_heavy, 74000, lambda c: 18 * c * c + 4 * c, False, "x + 2×SeedConvBlock(x)"),
    ("cnn", "copy_block", _cnn_copy_block, 74000, lambda c: 18 * c * c + 4 * c, True,
     "x + a(x) − b(x), a = b = the neighbouring host block", True),
    ("cnn", "widen", _cnn_widen, 82000, lambda c: 20 * c * c + 4 * c, True,
     "x + [I, −I]·BN(K x), K = the neighbouring block's channels twice", True),
    # transformer
    ("transformer", "noop", _tf_noop, 0, lambda d: 0, True, "x"),
    ("transformer", "norm", _tf_norm, 800, lambda d: 2 * d + 1, False, "x + tanh(s)·(LN(x) − x)"),
    ("transformer", "lora", _tf_lora, 6000, lambda d: 16 * d, True, "x + up(down(x)), rank 8"),
    ("transformer", "lora_large", _tf_lora_large, 25000, lambda d: 64 * d, True, "x + up(down(x)), rank 32"),
    ("transformer", "attention", _tf_attention, 50000, lambda d: 4 * d * d + 4 * d, True, "causal self-attention"),
    ("transformer", "flex_attention", _tf_attention, 55000, lambda d: 4 * d * d + 4 * d, True,
     "causal self-attention (SDPA)"),
    ("transformer", "mlp_small", _tf_mlp_small, 300000, lambda d: 4 * d * d + 3 * d, True, "MLP, expansion 2"),
    ("transformer", "mlp", _tf_mlp, 1200000, lambda d: 8 * d * d + 5 * d, True, "MLP, expansion 4"),
)

_REGISTRY: dict[tuple[str, str], BlueprintSpec] = {
    (spec[0], spec[1]): BlueprintSpec(*spec) for spec in _SPECS
}


def _check_topology(topology: str) -> None:
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; expected one of {list(TOPOLOGIES)}")


def names(topology: str) -> tuple[str, ...]:
    """Registered blueprint names of a topology, in registration order."""
    _check_topology(topology)
    return tuple(name for topo, name in _REGISTRY if topo == topology)


def get(topology: str, name: str) -> BlueprintSpec:
    """The spec of a registered blueprint; an unknown key raises ValueError listing the available names."""
    _check_topology(topology)
    try:
        return _REGISTRY[(topology, name)]
    except KeyError:
        raise ValueError(
            f"unknown blueprint {name!r} for topology {topology!r}; available: {list(names(topology))}"
        ) from None


def create(topology: str, name: str, dim: int, source: nn.Module | None = None, **kw) -> nn.Module:
    """Build blueprint `name` for a slot of width `dim` (channels C or embedding D); a `from_host` blueprint
    copies `source` (the host block next to the slot; None or a block of another shape: a fresh init, still
    cancelling), any other ignores it."""
    return get(topology, name).create(dim, source=source, **kw)


def param_count(topology: str, name: str, dim: int) -> int:
    """Exact trainable parameters of the blueprint at width `dim` with default kwargs (BEHAVIOUR §4.3, §4.4)."""
    return get(topology, name).param_formula(dim)


def list_for_topology(topology: str) -> list[BlueprintSpec]:
    """Specs of a topology ordered by their (stale) parameter estimate."""
    return sorted((get(topology, n) for n in names(topology)), key=lambda s: s.param_estimate)
