"""The seed experiments of the paper-reading posts, on the [attention] demo input:
1 head against 8 heads (how differently heads spread), and seq_len 20 against 6 (how distinct the
positional encodings are, and which position each one is closest to)."""

from __future__ import annotations

import math

import torch

from transformer_min.model import attention, embeddings
from transformer_min.report.figures import Artifacts
from transformer_min.report.render import Figure, Table, Text
from transformer_min.verify.base import Context
from transformer_min.verify.measures import attention_entropy
from transformer_min.core.figure import ftr, new_figure
from transformer_min.core.i18n import tr


def head_entropy(d_model: int, seq_len: int, num_heads: int, seed: int) -> list[float]:
    """Mean entropy (nats) of each head's attention rows on the demo input (randn + PE), sentence 0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, seq_len, d_model, generator=g) + embeddings.sinusoidal_table(seq_len, d_model)
    torch.manual_seed(seed)
    mha = attention.MultiHeadAttention(d_model, num_heads).eval()
    with torch.no_grad():
        _, w = mha(query=x, key=x, value=x, need_weights=True)  # (1, H, L, L)
    return attention_entropy(w)[0].tolist()  # (H,)


def pe_structure(seq_len: int, d_model: int) -> dict:
    """Distances between the PE vectors of positions 0..seq_len-1."""
    pe = embeddings.sinusoidal_table(seq_len, d_model, dtype=torch.float64)
    dist = torch.cdist(pe, pe)  # (L, L)
    off = dist + torch.diag(torch.full((seq_len,), float("inf"), dtype=torch.float64))
    nearest = [set(torch.nonzero(off[i] <= off[i].min() + 1e-9).flatten().tolist()) for i in range(seq_len)]
    neighbour = sum(bool(near) and near <= {i - 1, i + 1} for i, near in enumerate(nearest))
    by_offset = [torch.diagonal(dist, k) for k in range(1, seq_len)]
    spread = max((diag.max() - diag.min()).item() for diag in by_offset)  # distance depends only on |i - j|
    return {"dist": dist, "min": off.min().item(), "neighbour": neighbour, "spread": spread,
            "by_offset": [diag.mean().item() for diag in by_offset]}


def section(art: Artifacts, ctx: Context) -> list:
    """The two seed experiments: 1 head against h heads, and the PE distances at seq_len 6 and 20."""
    a = ctx.cfg.attention
    heads_table, fig_heads = heads_experiment(art, a)
    pe_table, fig_pe = pe_experiment(art, a.d_model)
    return [
        Text(tr("The [attention] demo of config.toml (a random (seq_len, d_model) input plus PE through seeded "
                "multi-head attention), varied the two ways the paper-reading posts vary it.")),
        heads_table, fig_heads, pe_table,
        Text(tr("The encodings of positions 0..5 are the same in both tables: PE depends on the position alone, not "
                "on the sequence length, so a longer input adds positions without moving the old ones. The distance "
                "between two encodings depends only on |i - j| (section 3.5's relative-position argument) and grows "
                "with it, so each position's nearest neighbours are i - 1 and i + 1.")),
        fig_pe,
    ]


def heads_experiment(art: Artifacts, a) -> tuple[Table, Figure]:
    """Entropy per head with 1 head and with h heads ([attention] num_heads, 8 when that is 1)."""
    ent1 = head_entropy(a.d_model, a.seq_len, 1, a.seed)
    heads = a.num_heads if a.num_heads > 1 else 8
    ent8 = head_entropy(a.d_model, a.seq_len, heads, a.seed)
    max_ent = math.log(a.seq_len)
    fig, ax = plt_bar(ent1, ent8, max_ent, heads)
    data = art.csv("head_entropy.csv", ["heads", "head", "entropy_nats", "max_entropy"],
                   [[1, 0, ent1[0], max_ent]] + [[heads, h, e, max_ent] for h, e in enumerate(ent8)])
    fig_heads = art.figure("head_entropy", fig, tr(
        "Mean attention entropy per head on the same input (seq_len {seq_len}, d_model {d_model}, seeded random "
        "weights): one head against {heads}. Each head has its own projections, so the heads spread their weight "
        "differently.").format(seq_len=a.seq_len, d_model=a.d_model, heads=heads), [data])
    mean8 = sum(ent8) / len(ent8)
    sd8 = (sum((e - mean8) ** 2 for e in ent8) / len(ent8)) ** 0.5
    heads_table = Table(["heads", "d_k", "entropy per head (nats)", "spread across heads (std)"],
                        [["1", str(a.d_model), f"{ent1[0]:.4f}", "-"],
                         [str(heads), str(a.d_model // heads), ", ".join(f"{e:.3f}" for e in ent8), f"{sd8:.4f}"]],
                        caption=tr("Uniform attention over {seq_len} positions has entropy "
                                   "ln {seq_len} = {max_ent:.4f}").format(seq_len=a.seq_len, max_ent=max_ent))
    return heads_table, fig_heads


def pe_experiment(art: Artifacts, d_model: int) -> tuple[Table, Figure]:
    """Distances between the positional encodings at seq_len 6 and 20: a table and one heatmap per length."""
    structures = {L: pe_structure(L, d_model) for L in (6, 20)}
    pe_rows, csv_rows = [], []
    for L, s in structures.items():
        pe_rows.append([str(L), f"{s['min']:.4f}", f"{s['neighbour']}/{L}",
                        ", ".join(f"{s['by_offset'][k - 1]:.2f}" for k in (1, 2, 3, 5) if k < L), f"{s['spread']:.2e}"])
        csv_rows += [[L, i, j, s["dist"][i, j].item()] for i in range(L) for j in range(L)]
    data = art.csv("pe_distance.csv", ["seq_len", "i", "j", "distance"], csv_rows)
    fig, axes = new_figure((4.2 * len(structures), 3.6), 1, len(structures))
    for ax, (L, s) in zip(axes, structures.items()):
        im = ax.imshow(s["dist"].numpy(), cmap="magma")
        ax.set_title(f"seq_len {L}: ||PE_i - PE_j||", fontsize=10)
        ax.set_xlabel("j")
        ax.set_ylabel("i")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.yaxis.get_major_locator().set_params(integer=True)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig_pe = art.figure("pe_distance", fig, tr("Distances between positional encodings (d_model {d_model}): every "
                                               "position is distinct, the distance grows with |i - j| and depends on "
                                               "nothing else.").format(d_model=d_model), [data])
    table = Table(["seq_len", "closest two positions (distance)", "positions whose nearest is i - 1 or i + 1",
                   "distance at |i - j| = 1, 2, 3, 5", "max spread of the distance at equal |i - j|"], pe_rows)
    return table, fig_pe


def plt_bar(ent1: list[float], ent8: list[float], max_ent: float, heads: int):
    """Bar chart: the one head's entropy, then each of the h heads', against ln seq_len."""
    fig, ax = new_figure((7, 3.2))
    ax.bar([0], ent1, color="#c44", label=ftr("1 head (d_k = d_model)"))
    ax.bar([i + 2 for i in range(len(ent8))], ent8, color="#3b75af", label=ftr("{heads} heads").format(heads=heads))
    ax.axhline(max_ent, color="#555", ls="--", lw=0.8, label=ftr("uniform (ln seq_len)"))
    ax.set_xticks([0] + [i + 2 for i in range(len(ent8))], [ftr("1 head")] + [f"h{i}" for i in range(len(ent8))],
                  fontsize=8)
    ax.set_ylabel(ftr("mean entropy (nats)"))
    ax.legend(fontsize=8, loc="lower right")
    return fig, ax

