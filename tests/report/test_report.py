"""`tmin report`: the quick report builds, its HTML is well formed and self-contained, it holds every
registered claim, and a deliberately broken model yields FAIL rows and exit code 1."""

from __future__ import annotations

import base64
import csv
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from transformer_min.cli import main as cli
from transformer_min.verify.registry import load_all

pytestmark = pytest.mark.usefixtures("restore_logging")  # cli.main reconfigures the root logger

VOID = {"meta", "img", "br", "hr", "input", "link", "col", "source", "wbr"}


class Structure(HTMLParser):
    """Checks nesting as it parses, and collects ids, links, images and table cells."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[str] = []
        self.cells: list[tuple[str, str]] = []  # (class, text) of every <td>
        self._td: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "td":
            self._td = [a.get("class", ""), ""]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
            return
        self.stack.pop()
        if tag == "td" and self._td is not None:
            self.cells.append((self._td[0], self._td[1].strip()))
            self._td = None

    def handle_data(self, data):
        if self._td is not None:
            self._td[1] += data


def parse(html_text: str) -> Structure:
    p = Structure()
    p.feed(html_text)
    p.close()
    return p


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory) -> tuple[int, Path]:
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = tmp_path_factory.mktemp("report")
    code = cli.main(["report", "--quick", "--out", str(out)])
    for handler in root.handlers:  # cli.main reconfigured the root logger: put it back for later tests
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    return code, out


def test_quick_report_passes_and_writes_every_file(quick_report):
    code, out = quick_report
    assert code == 0
    for name in ("report.html", "report.md", "data/claims.csv", "figures/pe_heatmap.png", "data/pe_matrix.csv",
                 "figures/lr_schedule.png", "figures/softmax_scaling.png", "figures/causal_mask.png",
                 "figures/attention_encoder.png", "figures/attention_decoder_self.png", "figures/attention_cross.png",
                 "figures/label_smoothing.png", "figures/table1_flops.png", "figures/table3_params.png",
                 "figures/head_entropy.png", "figures/pe_distance.png"):
        assert (out / name).is_file(), name
    assert not list(out.rglob("*.tmp")), "atomic writes leave no temporary files"


def test_html_is_well_formed_with_contents_and_colours(quick_report):
    _, out = quick_report
    doc = parse((out / "report.html").read_text(encoding="utf-8"))
    assert doc.errors == []
    assert doc.stack == [], f"unclosed tags: {doc.stack}"
    for section in ("summary", "claims", "table3", "table1", "figures", "attention", "experiments", "deviations"):
        assert section in doc.ids
        assert f"#{section}" in doc.links, f"the contents list links #{section}"
    statuses = [cls for cls, text in doc.cells if cls in ("PASS", "FAIL")]
    assert statuses and set(statuses) == {"PASS"}
    assert all(text == cls for cls, text in doc.cells if cls in ("PASS", "FAIL"))


def test_every_registered_claim_appears_in_html_md_and_csv(quick_report):
    _, out = quick_report
    html_text = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    with open(out / "data" / "claims.csv", newline="", encoding="utf-8") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    checks = load_all()
    for check in checks:
        assert check.id in html_text and check.id in md, check.id
        assert rows[check.id]["result"] == "PASS"
        assert rows[check.id]["code"] == check.code
    assert len(rows) == len(checks)
    assert f"{len(checks)}/{len(checks)} claims PASS" in md


def test_images_are_embedded_and_markdown_links_resolve(quick_report):
    _, out = quick_report
    doc = parse((out / "report.html").read_text(encoding="utf-8"))
    pngs = sorted((out / "figures").glob("*.png"))
    assert len(doc.images) == len(pngs) >= 14
    for src in doc.images:
        assert src.startswith("data:image/png;base64,"), "the HTML reads offline: no external image"
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text(encoding="utf-8")
    linked = re.findall(r"\]\(((?:figures|data)/[^)]+)\)", md)
    assert {p for p in linked if p.startswith("figures/")} == {f"figures/{p.name}" for p in pngs}
    for rel in linked:
        assert (out / rel).is_file(), rel


def test_every_csv_parses_with_a_header(quick_report):
    _, out = quick_report
    files = sorted((out / "data").glob("*.csv"))
    assert len(files) >= 12
    for path in files:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        assert len(rows) >= 2 and all(rows[0]), path.name
        assert all(len(r) == len(rows[0]) for r in rows), path.name


def test_table3_side_by_side_holds_the_paper_numbers(quick_report):
    _, out = quick_report
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| base | N 6, d 512, d_ff 2048, h 8, d_k 64, d_v 64 | 63,082,496 | 65,110,016 | 65.11M | 65 |" in md
    assert "| big | N 6, d 1024, d_ff 4096, h 16, d_k 64, d_v 64 | 214,245,376 |" in md
    assert "50,356,224" in md  # the big-row inconsistency is explained


def test_deviations_table_is_in_the_report(quick_report):
    _, out = quick_report
    md = (out / "report.md").read_text(encoding="utf-8")
    from transformer_min.report import deviations

    assert deviations.markdown_table().strip() in md


# ------------------------------------------------------------------------------------------------
# Broken models give FAIL rows and exit code 1 (partial reports: only the stages that catch them)
# ------------------------------------------------------------------------------------------------

def doubled_exponent_table(max_len: int, d_model: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, 2 * i / d_model)  # the bug: 2 * (2i) / d_model
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


def failed_rows(out: Path) -> dict[str, str]:
    with open(out / "data" / "claims.csv", newline="", encoding="utf-8") as f:
        return {r["id"]: r["result"] for r in csv.DictReader(f)}


def test_doubled_pe_exponent_fails_the_report(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("transformer_min.model.embeddings.sinusoidal_table", doubled_exponent_table)
    code = cli.main(["report", "--quick", "--stage", "positional", "--out", str(tmp_path)])
    assert code == 1
    rows = failed_rows(tmp_path)
    assert rows["positional.test_vectors"] == "FAIL"
    assert rows["positional.relative_rotation"] == "FAIL"
    doc = parse((tmp_path / "report.html").read_text(encoding="utf-8"))
    assert doc.errors == []
    assert ("FAIL", "FAIL") in doc.cells
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "**FAIL**" in md and "claims PASS, " in md
    assert "[FAIL] positional.test_vectors" in capsys.readouterr().out


def test_causal_mask_shifted_by_one_fails_the_report(monkeypatch, tmp_path):
    def shifted(size, device=None):  # position i also sees i + 1
        return torch.ones(size, size, dtype=torch.bool, device=device).tril(1)

    monkeypatch.setattr("transformer_min.model.masks.causal_mask", shifted)
    code = cli.main(["report", "--quick", "--stage", "masking", "--stage", "decoder", "--out", str(tmp_path)])
    assert code == 1
    rows = failed_rows(tmp_path)
    for check_id in ("masking.causal_mask_lower_triangular", "masking.target_mask_padding_and_causal",
                     "masking.model_decoder_weights_causal", "decoder.causal_weights_zero_above_diagonal"):
        assert rows[check_id] == "FAIL", check_id


def test_unknown_stage_is_a_readable_error(tmp_path, capsys):
    assert cli.main(["report", "--stage", "positonal", "--out", str(tmp_path)]) == 2
    assert "unknown stage 'positonal'" in capsys.readouterr().err


def test_missing_checkpoint_fails_before_the_claims_run(tmp_path, capsys):
    assert cli.main(["report", "--quick", "--checkpoint", str(tmp_path / "nope.pt"), "--out", str(tmp_path)]) == 2
    assert "nope.pt: checkpoint not found" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()


def test_help_lists_the_options_and_imports_no_torch():
    code = ("import sys; from transformer_min.cli import report; "
            "print('torch' in sys.modules, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])


def test_checkpoint_heatmaps_show_the_sample(tmp_path):
    checkpoint = pytest.importorskip("transformer_min.training.checkpoint")
    from transformer_min.core.config import Config, ModelConfig, TrainConfig, VocabConfig
    from transformer_min.model.transformer import build_model
    from transformer_min.report import build, figures
    from transformer_min.verify.registry import Context

    cfg = Config(model=ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=2, dropout=0.0, max_len=64),
                 vocab=VocabConfig(src_size=11, tgt_size=11), train=TrainConfig(task="reverse"))
    torch.manual_seed(0)
    path = checkpoint.save_checkpoint(tmp_path / "step_1.pt", model=build_model(cfg), cfg=cfg, step=1)
    art = figures.Artifacts()
    section = build.attention_section(art, Context(), str(path))
    text = " ".join(b.text for b in section.blocks if hasattr(b, "text"))
    assert "task reverse" in text and "['3', '4', '5', '6', '7', '8', '9', '10', 'EOS']" in text
    assert "anti-diagonal" in text
    names = sorted(b.name for b in section.blocks if hasattr(b, "png"))
    assert names == sorted(f"attention_{k}_layer{i}" for k in ("encoder", "decoder_self", "cross") for i in (1, 2))
    assert "data/attention.csv" in art.files


def test_report_in_chinese(monkeypatch, tmp_path, capsys):
    """--lang zh: the printed verdict lines and the report's stage headings and claims are in Chinese, the claims
    with the paper's English beside them."""
    monkeypatch.setattr("transformer_min.model.embeddings.sinusoidal_table", doubled_exponent_table)
    assert cli.main(["report", "--quick", "--stage", "positional", "--lang", "zh", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "[失败] positional.test_vectors (3.5): " in out and "-- 实测 " in out
    assert re.search(r"^\d/5 条论断通过，\d 条失败；报告已写入 ", out, flags=re.M)  # the failures counted too
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "正弦位置编码（论文 3.5）：" in md
    assert '取值在 [-1, 1] 内，每个位置的向量各不相同 ("values lie in [-1, 1] and every position gets a distinct ' \
           'vector")' in md
