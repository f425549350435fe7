"""Shared by the training benchmarks: the same configuration built from our modules and from
torch.nn.Transformer, one timed training step (forward, backward, optimizer), FLOP counting, and
the machine's matmul ceiling measured in the same run."""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works without `pip install -e .`

from transformer_min.model.embeddings import sinusoidal_table  # noqa: E402
from transformer_min.model.masks import causal_mask  # noqa: E402
from transformer_min.model.transformer import Transformer  # noqa: E402
from transformer_min.data.batch import Batch  # noqa: E402
from transformer_min.training.loss import label_smoothed_nll  # noqa: E402
from transformer_min.training.optim import build_optimizer  # noqa: E402

PAD = 0


class TorchTransformerMT(nn.Module):
    """The same model from torch.nn.Transformer: shared embedding x sqrt(d), sinusoidal PE,
    post-norm ReLU layers, tied pre-softmax projection (nn.Transformer adds two final LayerNorms)."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_ff: int, layers: int, dropout: float, max_len: int):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True)
        self.generator = nn.Linear(d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight

    def forward(self, src, tgt):
        s = self.drop(self.embed(src) * math.sqrt(self.d_model) + self.pe[: src.size(1)])
        t = self.drop(self.embed(tgt) * math.sqrt(self.d_model) + self.pe[: tgt.size(1)])
        mask = ~causal_mask(tgt.size(1), tgt.device)  # nn.Transformer: True = masked out
        h = self.core(s, t, tgt_mask=mask, src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
                      memory_key_padding_mask=src == PAD, tgt_is_causal=True)
        return self.generator(h)


def build_pair(vocab: int, d_model: int, heads: int, d_ff: int, layers: int, dropout: float = 0.1,
               max_len: int = 512) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    ours = Transformer(vocab, vocab, d_model, heads, d_ff, layers, dropout, max_len=max_len)
    torch.manual_seed(0)
    ref = TorchTransformerMT(vocab, d_model, heads, d_ff, layers, dropout, max_len)
    return {"ours": ours, "nn.Transformer": ref}


def synthetic_batch(vocab: int, batch: int, src_len: int, tgt_len: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (batch, src_len), generator=g)
    tgt = torch.randint(3, vocab, (batch, tgt_len + 1), generator=g)
    return Batch(src, tgt[:, :-1], tgt[:, 1:])


class Stepper:
    """One training step of `model` (forward, label-smoothed loss, backward, fused Adam).

    loss: "fused": the model's own generator + loss pass, as `tmin train` takes it (train.loss_kernel =
    "fused", model/generator_loss.py); "paper": logits, then training.loss.label_smoothed_nll (5.4);
    "torch": logits, then torch's own F.cross_entropy(label_smoothing=0.1), the fastest stock loss, which
    the reference model gets.
    """

    def __init__(self, model: nn.Module, device, precision: str = "fp32", loss: str = "paper"):
        self.model = model.to(device).train()
        self.opt = build_optimizer(self.model)
        for g in self.opt.param_groups:
            g["lr"] = 1e-4
        self.device, self.precision, self.loss = torch.device(device), precision, loss

    def __call__(self, b: Batch) -> float:
        ctx = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.precision == "bf16"
               else torch.autocast(self.device.type, enabled=False))
        with ctx:
            if self.loss == "fused":
                loss, _, n = self.model(b.src, b.tgt_in, targets=b.tgt_out, label_smoothing=0.1)
            elif self.loss == "torch":
                logits = self.model(b.src, b.tgt_in)
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), b.tgt_out.reshape(-1),
                                       ignore_index=PAD, label_smoothing=0.1, reduction="sum")
                n = int((b.tgt_out != PAD).sum())
            else:
                logits = self.model(b.src, b.tgt_in)
                loss, _, n = label_smoothed_nll(logits, b.tgt_out, 0.1, PAD)
        (loss / n).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_interleaved(fns: dict, batch: Batch, reps: int, warmup: int, device) -> dict[str, float]:
    """Median seconds per call of each fn, alternating the order every repetition."""
    for fn in fns.values():
        for _ in range(warmup):
            fn(batch)
    sync(device)
    times = {k: [] for k in fns}
    names = list(fns)
    for r in range(reps):
        for k in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            fns[k](batch)
            sync(device)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def count_step_flops(model: nn.Module, b: Batch) -> int:
    """FLOPs of forward + backward (torch.utils.flop_counter; the optimizer's elementwise work is not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        logits = model(b.src, b.tgt_in)
        loss, _, n = label_smoothed_nll(logits, b.tgt_out, 0.1, PAD)
        (loss / n).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_ceiling(device, dtype=torch.float32, n: int = 2048, reps: int = 10) -> float:
    """FLOP/s of a large square torch.mm on this device: the practical ceiling for matmul-bound work."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best
