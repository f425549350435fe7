"""The generator (section 3.4, the pre-softmax linear map) and the label-smoothed loss (section 5.4) in one
pass over the vocabulary, for training.

The paper path, `generator(hidden)` then `training.loss.label_smoothed_nll`, writes the (B, T, V) logits, their
log-softmax, and in the backward pass several more (B, T, V) tensors (the gather's and the sum's gradients,
the log-softmax gradient). At V = 8,000 and 4,000 target tokens each is 128 MB, and on a CPU a fresh buffer of
that size costs more in page faults than the arithmetic on it. This path goes through the rows of real
target tokens (pad rows cost nothing) a chunk at a time and computes, per chunk,

    z = h W^T (+ b)                    the logits, (n, V)
    lse = log sum_c exp z_c            log p_c = z_c - lse
    loss = -sum_c q_c log p_c          q = (1 - eps) onehot(y) + eps / (V - 1) off pad, 0 on pad
    dloss/dz = softmax(z) - q          (sum_c q_c = 1)

and with it the gradients dh = (p - q) W and dW = (p - q)^T h, which the backward pass only scales. No
tensor of the full (B, T, V) is ever formed. The target distribution, the token count and the sums are
those of `label_smoothed_nll`, which is the reference this is tested against (tests/model/
test_generator_loss.py): same loss and gradients to float rounding, and the same training after real
optimizer steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Rows per chunk: one chunk's (rows, V) logits take at most this much memory. It bounds the extra memory of
# the loss (the paper path holds several full (B, T, V) tensors), while a chunk stays large enough that W,
# read once per chunk in each of three products, is read only a few times per step. A memory bound, not a
# timing of any CPU.
CHUNK_BYTES = 8 << 20


def chunk_rows(vocab: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    return max(32, chunk_bytes // (4 * max(vocab, 1)))


def _logits_into(z: Tensor, hc: Tensor, wm: Tensor, bm: Tensor | None, dtype: torch.dtype | None) -> None:
    """z (n, V) <- hc W^T (+ b): in place when no autocast dtype (fp32 or float64), else through `dtype`."""
    if dtype is not None:
        z.copy_(hc @ wm.t() if bm is None else torch.addmm(bm, hc, wm.t()))
    elif bm is None:
        torch.mm(hc, wm.t(), out=z)
    else:
        torch.addmm(bm, hc, wm.t(), out=z)


def _chunk_loss(z: Tensor, yc: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """z (n, V) logits -> (loss_sum, nll_sum, total); z becomes exp(z - max) in place, total (n, 1) its sum."""
    V = z.size(1)
    z_y = z.gather(1, yc.unsqueeze(1)).squeeze(1)  # (n,)
    z_rest = z.sum(-1) - z[:, pad_id]  # (n,): sum of the logits off pad
    top = z.amax(-1, keepdim=True)  # (n, 1)
    e = z.sub_(top).exp_()  # (n, V): exp(z - max), in place of the logits
    total = e.sum(-1, keepdim=True)  # (n, 1)
    lse = top.squeeze(1) + total.squeeze(1).log()  # (n,): log sum_c exp z_c
    nll_c = lse - z_y  # -log p_y
    # -sum_{c != pad} log p_c / (V - 1) = lse - (sum_{c != pad} z_c) / (V - 1)
    smooth = lse - z_rest / (V - 1)
    return ((1.0 - eps) * nll_c + eps * smooth).sum(), nll_c.sum(), total


def _chunk_dlogits(e: Tensor, total: Tensor, yc: Tensor, eps: float, pad_id: int) -> Tensor:
    """exp(z - max) (n, V) -> dloss/dz = p - q (n, V), in place."""
    off_pad = eps / (e.size(1) - 1)
    g = e.div_(total)  # (n, V): the softmax p, in place
    g.sub_(off_pad)
    g[:, pad_id] += off_pad  # q_pad = 0
    return g.scatter_add_(1, yc.unsqueeze(1), torch.full((yc.numel(), 1), -(1.0 - eps), dtype=g.dtype,
                                                          device=g.device))


class _GeneratorLoss(torch.autograd.Function):
    """(h (N, D), W (V, D), b (V,) or None, y (N,)) -> (loss_sum, nll_sum); gradients made in the forward."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, eps: float, pad_id: int,
                rows: int):
        need = ctx.needs_input_grad
        dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else None
        # under autocast the matmuls run in its dtype, as the paper path's nn.Linear would; the softmax in fp32
        hm, wm = (h, weight) if dtype is None else (h.to(dtype), weight.to(dtype))
        bm = None if bias is None else (bias if dtype is None else bias.to(dtype))
        acc = torch.promote_types(h.dtype, torch.float32)  # fp32 at least (float64 stays float64, for gradcheck)
        grad_h = torch.empty_like(h) if need[0] else None
        grad_w = torch.zeros(weight.shape, dtype=acc, device=h.device) if need[1] else None
        grad_b = torch.zeros(weight.size(0), dtype=acc, device=h.device) if need[2] and bias is not None else None
        loss = torch.zeros((), dtype=acc, device=h.device)
        nll = torch.zeros((), dtype=acc, device=h.device)
        # one (rows, V) buffer for every chunk's logits, overwritten in place: no fresh pages per chunk
        buf = torch.empty(min(rows, h.size(0)), weight.size(0), dtype=acc, device=h.device)
        with torch.autocast(h.device.type, enabled=False):
            for start in range(0, h.size(0), rows):
                hc, yc = hm[start:start + rows], target[start:start + rows]  # (n, D), (n,)
                z = buf[:hc.size(0)]  # (n, V)
                _logits_into(z, hc, wm, bm, dtype)
                loss_c, nll_c, total = _chunk_loss(z, yc, eps, pad_id)
                loss += loss_c
                nll += nll_c
                if grad_h is None and grad_w is None and grad_b is None:
                    continue
                g = _chunk_dlogits(z, total, yc, eps, pad_id)  # (n, V)
                gm = g if dtype is None else g.to(dtype)
                if grad_h is not None:
                    if dtype is None:
                        torch.mm(gm, wm, out=grad_h[start:start + rows])
                    else:
                        grad_h[start:start + rows].copy_(gm @ wm)
                if grad_w is not None:
                    grad_w.addmm_(gm.t(), hc) if dtype is None else grad_w.add_((gm.t() @ hc).to(acc))
                if grad_b is not None:
                    grad_b += g.sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_nll: Tensor):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        dh = None if grad_h is None else grad_h * g_loss.to(grad_h.dtype)
        dw = None if grad_w is None else (grad_w * g_loss).to(ctx.dtypes[0])
        db = None if grad_b is None else (grad_b * g_loss).to(ctx.dtypes[1])
        return dh, dw, db, None, None, None, None


def generator_loss(hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, eps: float,
                   pad_id: int, rows: int | None = None) -> tuple[Tensor, Tensor, int]:
    """hidden (B, T, D) -> (loss_sum, nll_sum, n_tokens) of `label_smoothed_nll(hidden W^T + b, target)`,
    section 5.4, without forming the (B, T, V) logits. Only loss_sum is differentiable (nll_sum is a number
    to log). The gradient with respect to nll_sum is not provided."""
    keep = target != pad_id  # (B, T)
    h = hidden[keep]  # (N, D): the rows of real target tokens
    y = target[keep]  # (N,)
    loss, nll = _GeneratorLoss.apply(h, weight, bias, y, float(eps), int(pad_id),
                                     rows or chunk_rows(weight.size(0)))
    return loss, nll.detach(), int(y.numel())
