"""TransformerHost: a GPT-style pre-LN decoder with a tied head (BEHAVIOUR §3.2)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from esper_fx.contracts.slots import format_slot_id
from hosts.layout import LN_EPS, InjectionSpec, segment_index

DROPOUT = 0.1
INIT_STD = 0.02


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
        self.n_head = n_head
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in self.c_attn(x).split(d, 2))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d)))


class MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()  # exact (erf) GELU
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm block: x + Attn(LN1(x)), then x + MLP(LN2(x))."""

    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TransformerHost(nn.Module):
    """Token + position embeddings, n_layer pre-LN blocks, ln_f, head tied to the token embedding.

    Slot `r0c{i}` sits after layer L_s·(i+1), L_s = n_layer / num_segments.
    """

    def __init__(
        self,
        vocab_size: int = 50257,
        n_embd: int = 384,
        n_head: int = 6,
        n_layer: int = 6,
        block_size: int = 256,
        dropout: float = DROPOUT,
        num_segments: int = 3,
    ) -> None:
        super().__init__()
        if num_segments < 1 or n_layer % num_segments != 0:
            raise ValueError(f"n_layer ({n_layer}) must be divisible by num_segments ({num_segments})")
        self.vocab_size, self.n_embd, self.n_layer, self.block_size = vocab_size, n_embd, n_layer, block_size
        self.num_segments = num_segments
        self.layers_per_segment = n_layer // num_segments
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: one parameter
        self.segment_ids = [format_slot_id(0, i) for i in range(num_segments)]
        self._init_weights()

    @classmethod
    def pytext(cls, dropout: float = DROPOUT) -> "TransformerHost":
        """The pytext preset: vocab 256, D 128, 4 heads, 3 layers, block 128 (644,224 parameters)."""
        return cls(vocab_size=256, n_embd=128, n_head=4, n_layer=3, block_size=128, dropout=dropout)

    @staticmethod
    def expected_param_count(vocab_size: int, n_embd: int, n_layer: int, block_size: int) -> int:
        """V·D + block·D + n_layer·(12D² + 13D) + 2D (the tied weight counted once)."""
        d = n_embd
        return vocab_size * d + block_size * d + n_layer * (12 * d * d + 13 * d) + 2 * d

    def _init_weights(self) -> None:
        """[fix] GPT-2 init: N(0, 0.02) weights, zero biases, LN (1, 0), residual projections scaled."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, INIT_STD)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        resid_std = INIT_STD / math.sqrt(2 * self.n_layer)
        for block in self.layers:
            nn.init.normal_(block.attn.c_proj.weight, 0.0, resid_std)
            nn.init.normal_(block.mlp.c_proj.weight, 0.0, resid_std)

    def injection_specs(self) -> list[InjectionSpec]:
        ls = self.layers_per_segment
        return [
            InjectionSpec(seg, self.n_embd, (i + 1) / self.num_segments, (ls * i, ls * (i + 1)))
            for i, seg in enumerate(self.segment_ids)
        ]

    def _embed(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.block_size}")
        pos = torch.arange(t, device=idx.device)
        return self.drop(self.tok_emb(idx) + self.pos_emb(pos))

    def _run_layers(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        for layer in self.layers[start:stop]:
            x = layer(x)
        return x

    def _boundary(self, seg: str) -> int:
        return self.layers_per_segment * (segment_index(self.segment_ids, seg) + 1)

    def forward_to_segment(self, seg: str, x: torch.Tensor, from_seg: str | None = None) -> torch.Tensor:
        """Token ids (from_seg None: embeddings first) or hidden states, up to the boundary of `seg`."""
        if from_seg is None:
            x, start = self._embed(x), 0
        else:
            start = self._boundary(from_seg)
        return self._run_layers(x, start, self._boundary(seg))

    def forward_from_segment(self, seg: str, x: torch.Tensor) -> torch.Tensor:
        """The layers after `seg`, ln_f and the tied head: logits (B, T, V)."""
        return self.head(self.ln_f(self._run_layers(x, self._boundary(seg), self.n_layer)))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(self._run_layers(self._embed(idx), 0, self.n_layer)))
