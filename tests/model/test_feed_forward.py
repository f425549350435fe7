"""feed_forward.py: eq. (2), FFN(x) = max(0, x W1 + b1) W2 + b2, section 3.3."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from transformer_min.model import reference
from transformer_min.model.feed_forward import PositionwiseFeedForward

D_MODEL, D_FF = 16, 64


def make_ffn(dtype=torch.float32) -> PositionwiseFeedForward:
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(D_MODEL, D_FF).to(dtype).eval()
    with torch.no_grad():
        ffn.w_1.bias.normal_()
        ffn.w_2.bias.normal_()
    return ffn


def test_equation_2_matches_numpy_reference():
    ffn = make_ffn(torch.float64)
    x = torch.randn(3, 7, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        ours = ffn(x).numpy()
    want = reference.position_wise_ffn(
        x.numpy(), ffn.w_1.weight.detach().numpy().T, ffn.w_1.bias.detach().numpy(),
        ffn.w_2.weight.detach().numpy().T, ffn.w_2.bias.detach().numpy())
    np.testing.assert_allclose(ours, want, atol=1e-12, rtol=0)
    assert ffn.w_1.out_features == D_FF and ffn.w_2.out_features == D_MODEL  # d_model -> d_ff -> d_model


def test_relu_is_active():
    """Some hidden units are clipped at 0 (the max(0, .) of eq. (2) is exercised at these sizes)."""
    ffn = make_ffn()
    with torch.no_grad():
        hidden = ffn.w_1(torch.randn(3, 7, D_MODEL))
    assert (hidden < 0).any() and (hidden > 0).any()


def test_permuting_positions_commutes():
    ffn = make_ffn()
    x = torch.randn(2, 9, D_MODEL)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm], atol=1e-6, rtol=0)
        # and each position alone gives the same answer as inside the sequence
        torch.testing.assert_close(ffn(x[:, 4:5]), ffn(x)[:, 4:5], atol=1e-6, rtol=0)


def test_equals_two_kernel_size_1_convolutions():
    ffn = make_ffn()
    conv1 = nn.Conv1d(D_MODEL, D_FF, kernel_size=1)
    conv2 = nn.Conv1d(D_FF, D_MODEL, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.w_1.weight[:, :, None])
        conv1.bias.copy_(ffn.w_1.bias)
        conv2.weight.copy_(ffn.w_2.weight[:, :, None])
        conv2.bias.copy_(ffn.w_2.bias)
        x = torch.randn(2, 9, D_MODEL)
        want = conv2(torch.relu(conv1(x.transpose(1, 2)))).transpose(1, 2)  # Conv1d wants (B, C, L)
        torch.testing.assert_close(ffn(x), want, atol=1e-5, rtol=0)


def test_default_has_no_relu_dropout():
    """ReLU dropout is not in the paper: by default training mode computes the same function."""
    ffn = make_ffn()
    x = torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(ffn.train()(x), ffn.eval()(x), atol=0, rtol=0)


def _graph_nodes(t: torch.Tensor) -> set[str]:
    """The names of every autograd node behind `t`."""
    seen, stack, names = set(), [t.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(n for n, _ in node.next_functions)
    return names


def test_training_backward_copies_nothing_and_matches_out_of_place_relu():
    """The in-place ReLU is on W1's own 2-D product, not on a view of it: autograd records no CopySlices
    (four (B, L, d_ff) copies per layer in backward), and values and gradients equal eq. (2) written out
    of place, bit for bit."""
    ffn = make_ffn().train()
    x = torch.randn(3, 7, D_MODEL, requires_grad=True)
    y = ffn(x)
    assert y.shape == x.shape
    names = _graph_nodes(y)
    assert not {"CopySlices", "AsStridedBackward0"} & names, names
    g = torch.randn_like(y)
    y.backward(g)
    got = (x.grad.clone(), ffn.w_1.weight.grad.clone(), ffn.w_2.bias.grad.clone())
    x.grad = None
    ffn.zero_grad()
    want = ffn.w_2(torch.relu(ffn.w_1(x)))  # eq. (2), out of place, on (B, L, D)
    want.backward(g)
    assert torch.equal(y, want)
    for a, b in zip(got, (x.grad, ffn.w_1.weight.grad, ffn.w_2.bias.grad)):
        assert torch.equal(a, b)
