"""The report's figures, each drawn from returned values and saved with the CSV of its data.

Library functions are called through their modules (`embeddings.sinusoidal_table`,
`masks.causal_mask`), so a patched, deliberately broken function is what the figures show.
"""

from __future__ import annotations

import csv
import io
import math

import torch

from transformer_min.model import embeddings, masks
from transformer_min.report.render import Figure
from transformer_min.core.figure import ftr, new_figure, png_bytes
from transformer_min.core.i18n import tr


class Artifacts:
    """Collects figures/*.png and data/*.csv (relative path -> bytes) for the writer."""

    def __init__(self):
        self.files: dict[str, bytes] = {}

    def csv(self, name: str, headers: list[str], rows) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(headers)
        for row in rows:
            w.writerow([_fmt(v) for v in row])
        self.files[f"data/{name}"] = buf.getvalue().encode("utf-8")
        return name

    def figure(self, name: str, fig, caption: str, data: list[str]) -> Figure:
        png = png_bytes(fig, dpi=90, bbox_inches="tight")
        self.files[f"figures/{name}.png"] = png
        return Figure(name, caption, png, data)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.8g}"
    return str(v)


# ---------------------------------------------------------------------------------------------
# Section 3.5: positional encoding
# ---------------------------------------------------------------------------------------------

def positional(art: Artifacts, positions: int = 100, d_model: int = 512) -> list[Figure]:
    pe = embeddings.sinusoidal_table(positions, d_model, dtype=torch.float64)  # (L, D)
    fig, ax = new_figure((10, 3.6))
    im = ax.imshow(pe.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel(ftr("dimension (even: sin, odd: cos)"))
    ax.set_ylabel(ftr("position"))
    ax.set_title(ftr("PE matrix, {positions} positions x d_model {d_model}").format(positions=positions,
                                                                                   d_model=d_model))
    fig.colorbar(im, ax=ax, fraction=0.03)
    data = art.csv("pe_matrix.csv", ["pos"] + [f"d{i}" for i in range(d_model)],
                   ([p] + [round(v, 6) for v in row] for p, row in enumerate(pe.tolist())))
    heat = art.figure("pe_heatmap", fig, tr("Section 3.5: the sinusoidal positional encoding. Each row is one "
                                            "position; frequencies fall from left to right (wavelengths 2 pi .. "
                                            "10000 2 pi)."), [data])

    dims = [4, 5, 6, 7, 64, 65]
    fig, ax = new_figure((10, 3.2))
    for dim in dims:
        ax.plot(range(positions), pe[:, dim].numpy(),
                label=ftr("dim {dim} ({fn})").format(dim=dim, fn="sin" if dim % 2 == 0 else "cos"))
    ax.set_xlabel(ftr("position"))
    ax.set_ylabel("PE(pos, dim)")
    ax.legend(ncol=3, fontsize=8)
    data = art.csv("pe_dimensions.csv", ["pos"] + [f"d{d}" for d in dims],
                   ([p] + [pe[p, d].item() for d in dims] for p in range(positions)))
    lines = art.figure("pe_dimensions", fig, tr("A few dimensions against position: a sin/cos pair shares one "
                                                "frequency; higher pairs are slower."), [data])
    return [heat, lines]


# ---------------------------------------------------------------------------------------------
# Section 5.3: eq. (3)
# ---------------------------------------------------------------------------------------------

SCHEDULES = ((512, 4000), (512, 8000), (256, 4000))


def schedule(art: Artifacts, every: int = 10, last: int = 20000) -> Figure:
    from transformer_min.training.schedule import rate

    steps = list(range(1, last + 1, every))
    curves = {(d, w): [rate(s, d, w) for s in steps] for d, w in SCHEDULES}
    fig, ax = new_figure((8, 3.4))
    for (d, w), values in curves.items():
        ax.plot(steps, values, label=ftr("d_model {d_model}, warmup {warmup}").format(d_model=d, warmup=w))
    ax.set_xlabel(ftr("step"))
    ax.set_ylabel(ftr("learning rate"))
    ax.legend()
    data = art.csv("lr_schedule.csv", ["step"] + [f"d{d}_w{w}" for d, w in SCHEDULES],
                   ([s] + [curves[k][i] for k in SCHEDULES] for i, s in enumerate(steps)))
    return art.figure("lr_schedule", fig, tr("Eq. (3): lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5). "
                                             "Linear warm-up, peak at step = warmup, then inverse square-root "
                                             "decay."), [data])


# ---------------------------------------------------------------------------------------------
# Section 3.2.1: why 1/sqrt(d_k)
# ---------------------------------------------------------------------------------------------

def softmax_stats(d_k: int, rows: int, keys: int = 16, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Mean max softmax probability and mean gradient norm (of the max probability with respect to
    the logits) for q.k logits with unit-variance q, k, with and without the 1/sqrt(d_k) factor."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, 1, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(rows, keys, d_k, generator=g, dtype=torch.float64)
    dots = (q @ k.transpose(1, 2)).squeeze(1)  # (rows, keys)
    out = {}
    for name, scale in (("unscaled", 1.0), ("scaled", 1 / math.sqrt(d_k))):
        logits = (dots * scale).requires_grad_(True)
        p = torch.softmax(logits, -1)
        top = p.max(-1).values
        top.sum().backward()
        out[name] = (top.mean().item(), logits.grad.norm(dim=-1).mean().item())
    return out


def softmax_scaling(art: Artifacts, rows: int = 2000, max_log2: int = 10) -> Figure:
    dks = [2 ** i for i in range(0, max_log2 + 1)]
    stats = {d: softmax_stats(d, rows) for d in dks}
    fig, (a1, a2) = new_figure((10, 3.4), 1, 2)
    for name, style in (("unscaled", "o-"), ("scaled", "s-")):
        label = "q.k" if name == "unscaled" else "q.k / sqrt(d_k)"
        a1.plot(dks, [stats[d][name][0] for d in dks], style, label=label)
        a2.plot(dks, [stats[d][name][1] for d in dks], style, label=label)
    for ax, title in ((a1, ftr("mean max softmax probability (16 keys)")), (a2, ftr("mean gradient norm"))):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_k")
        ax.set_title(title, fontsize=10)
        ax.legend()
    a2.set_yscale("log")
    data = art.csv("softmax_scaling.csv", ["d_k", "max_p_unscaled", "grad_unscaled", "max_p_scaled", "grad_scaled"],
                   ([d, *stats[d]["unscaled"], *stats[d]["scaled"]] for d in dks))
    return art.figure("softmax_scaling", fig, tr("Section 3.2.1, footnote 4: without 1/sqrt(d_k) the dot products "
                                                 "grow with d_k, the softmax saturates and its gradients vanish "
                                                 "({rows} random queries per point).").format(rows=rows), [data])


# ---------------------------------------------------------------------------------------------
# Section 3.2.3: the causal mask
# ---------------------------------------------------------------------------------------------

def causal_mask(art: Artifacts, size: int = 10) -> Figure:
    m = masks.causal_mask(size)
    fig, ax = new_figure((3.6, 3.4))
    ax.imshow(m.numpy(), cmap="Greys", vmin=0, vmax=1)
    for i in range(size):
        for j in range(size):
            ax.text(j, i, int(m[i, j]), ha="center", va="center", fontsize=7, color="white" if m[i, j] else "black")
    ax.set_xlabel(ftr("key position j"))
    ax.set_ylabel(ftr("query position i"))
    data = art.csv("causal_mask.csv", ["query"] + [f"k{j}" for j in range(size)],
                   ([i] + [int(v) for v in row] for i, row in enumerate(m.tolist())))
    return art.figure("causal_mask", fig, tr("Section 3.2.3: the decoder's mask (1 = may attend): position i "
                                             "sees j <= i, the diagonal included."), [data])


# ---------------------------------------------------------------------------------------------
# Attention heatmaps, per head
# ---------------------------------------------------------------------------------------------

KIND_TITLES = {"encoder": "encoder self-attention", "decoder_self": "decoder masked self-attention",
               "cross": "encoder-decoder attention"}


def attention(art: Artifacts, att, src_labels: list[str], tgt_labels: list[str], note: str,
              layers: list[int] | None = None) -> list[Figure]:
    """att: the `Attention` tuple for one batch; sentence 0 is drawn, every head of the chosen layers."""
    rows_csv, figures = [], []
    axes_labels = {"encoder": (src_labels, src_labels), "decoder_self": (tgt_labels, tgt_labels),
                   "cross": (tgt_labels, src_labels)}
    for kind in ("encoder", "decoder_self", "cross"):
        per_layer = getattr(att, kind)
        for li, w in enumerate(per_layer):
            for h in range(w.shape[1]):
                for i, row in enumerate(w[0, h].tolist()):
                    rows_csv += [[kind, li, h, i, j, v] for j, v in enumerate(row)]
    data = art.csv("attention.csv", ["kind", "layer", "head", "query", "key", "weight"], rows_csv)
    for kind in ("encoder", "decoder_self", "cross"):
        per_layer = getattr(att, kind)
        chosen = layers if layers is not None else [len(per_layer) - 1]
        ylab, xlab = axes_labels[kind]
        for li in chosen:
            w = per_layer[li][0].float()  # (H, Lq, Lk)
            H, vmax = w.shape[0], max(float(w.max()), 1e-6)
            cols = min(H, 4)
            nrows = math.ceil(H / cols)
            fig, axes = new_figure((2.6 * cols, 2.5 * nrows + 0.4), nrows, cols, squeeze=False)
            for h in range(nrows * cols):
                ax = axes[h // cols][h % cols]
                if h >= H:
                    ax.axis("off")
                    continue
                im = ax.imshow(w[h].numpy(), cmap="viridis", vmin=0, vmax=vmax)
                ax.set_title(ftr("head {head}").format(head=h), fontsize=9)
                small = len(xlab) <= 20
                ax.set_xticks(range(len(xlab)), xlab if small else [""] * len(xlab), rotation=90, fontsize=6)
                ax.set_yticks(range(len(ylab)), ylab if small else [""] * len(ylab), fontsize=6)
            fig.suptitle(ftr("{kind}, layer {layer} of {layers} (colour 0 .. {vmax:.2f})").format(
                kind=ftr(KIND_TITLES[kind]), layer=li + 1, layers=len(per_layer), vmax=vmax), fontsize=10)
            fig.tight_layout()
            fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02)
            name = f"attention_{kind}" + (f"_layer{li + 1}" if layers is not None else "")
            caption = tr("{kind}, every head of layer {layer}: rows are queries, columns keys. {note}").format(
                kind=tr(KIND_TITLES[kind].capitalize()), layer=li + 1, note=note)
            figures.append(art.figure(name, fig, caption, [data]))
    return figures


# ---------------------------------------------------------------------------------------------
# Section 5.4: label smoothing
# ---------------------------------------------------------------------------------------------

def label_smoothing(art: Artifacts, vocab: int = 11, target: int = 5, eps: float = 0.1, pad_id: int = 0) -> Figure:
    from transformer_min.training.loss import smoothed_target

    q = smoothed_target(torch.tensor([target]), vocab, eps, pad_id)[0]
    fig, ax = new_figure((6, 3))
    ax.bar(range(vocab), q.numpy(), color=["#999" if c == pad_id else "#3b75af" for c in range(vocab)])
    ax.bar(range(vocab), [1.0 if c == target else 0.0 for c in range(vocab)], fill=False, edgecolor="#c33",
           linestyle="--", label=ftr("one-hot (eps = 0)"))
    ax.set_xticks(range(vocab))
    ax.set_xlabel(ftr("class (pad = {pad_id})").format(pad_id=pad_id))
    ax.set_ylabel(ftr("target probability q"))
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 1.5)
    ax.legend(fontsize=8)
    data = art.csv("label_smoothing.csv", ["class", "q", "onehot"],
                   ([c, q[c].item(), int(c == target)] for c in range(vocab)))
    return art.figure("label_smoothing", fig, tr(
        "Section 5.4, eps_ls = {eps}: the smoothed target for class {target} of V = {vocab}: {true:.3f} on the true "
        "class, eps/(V-1) = {other:.3f} on every other non-pad class, 0 on pad.").format(
        eps=eps, target=target, vocab=vocab, true=1 - eps + eps / (vocab - 1), other=eps / (vocab - 1)), [data])
