"""Dropout, section 5.4 ("Residual Dropout", P_drop = 0.1), with its CPU mask drawn in bulk.

Training multiplies each element by 0 with probability p and by 1 / (1 - p) otherwise, so the expected output
is the input (inverted dropout, as nn.Dropout); at inference it is the identity.

Why not nn.Dropout as it is: on the CPU, torch draws a dropout mask one element at a time from its Mersenne
Twister (aten::bernoulli_), about 15 ns an element on every CPU, since the generator is serial whatever the
vector units: 10% of a d_model 512 training step (docs/performance.md, issue 37). Here the CPU mask is 32
random bits an element from NumPy's PCG64 in bulk (about 1 ns per 64 bits), compared with p * 2^32: the same Bernoulli(1 - p) law, p realised to 2^-32 (torch's float path: 2^-24).
Its seed is drawn from torch's default generator at each call, so torch.manual_seed makes runs reproducible
as before, and every call draws a fresh, independent mask. On CUDA, under torch.compile, with inplace=True
or p = 0 it is nn.Dropout itself (those paths already generate in bulk, or there is nothing to draw).

The module is an nn.Dropout (same `p`, `inplace`, no parameters, same state_dict), so code that looks for
nn.Dropout modules (`tmin verify`'s regularization check) sees it unchanged.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

_BITS = 2 ** 32
_SEED_HIGH = 2 ** 63 - 1


def keep_mask(shape: torch.Size, p: float) -> tuple[Tensor, float]:
    """A fresh (shape) bool mask, True (kept) with probability 1 - p, and the scale 1 / (1 - p), for 0 < p < 1.

    Element i is kept when its 32 random bits, as a signed int32 u_i in [-2^31, 2^31), satisfy
    u_i >= round(p * 2^32) - 2^31: probability 1 - round(p * 2^32) / 2^32 exactly, which the scale inverts.
    """
    n = shape.numel()
    seed = int(torch.randint(0, _SEED_HIGH, (1,), dtype=torch.int64).item())  # torch's generator: manual_seed holds
    raw = np.random.PCG64(seed).random_raw((n + 1) // 2)  # (ceil(n / 2),) uint64 = n 32-bit draws
    bits = torch.from_numpy(raw.view(np.int32)[:n]).view(shape)  # (*shape) int32, uniform
    dropped = round(p * _BITS)
    return bits >= dropped - _BITS // 2, _BITS / (_BITS - dropped)


class Dropout(nn.Dropout):
    """nn.Dropout(p) whose CPU training mask is drawn in bulk (module docstring); the identity at inference."""

    def forward(self, x: Tensor) -> Tensor:
        if (not self.training or self.p == 0.0 or self.p >= 1.0 or self.inplace or x.device.type != "cpu"
                or torch.compiler.is_compiling()):
            return super().forward(x)
        keep, scale = keep_mask(x.shape, self.p)
        if x.dtype in (torch.float32, torch.float64):  # one product; backward: grad * the same saved mask
            return x * keep.to(x.dtype).mul_(scale)
        return x * keep.to(x.dtype) * scale  # bf16/fp16: the scale as a scalar, as nn.Dropout applies it
