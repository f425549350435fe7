"""The page: one HTML file with its CSS, JS and data inline (nothing is fetched from the network), and the
data the static file carries precomputed (every setting of the demo's toggles, the example sentences)."""

from __future__ import annotations

import json
import re
from html import escape
from importlib import resources

from transformer_min.viz.explore.curves import curves
from transformer_min.viz.explore.equation import demo_equation, head_choices, seq_len_choices
from transformer_min.viz.explore.sentence import KINDS, model_equation, translate
from transformer_min.viz.explore.session import Session
from transformer_min.viz.explore.text import html_lang, page_text

ASSETS = ("explore.css", "heatmap.js", "explore.js", "explore_model.js")
STATIC_EXAMPLES = 3  # sentences precomputed in the static file


def asset(name: str) -> str:
    """A file of the packaged assets (transformer_min/viz/explore/assets)."""
    return resources.files("transformer_min.viz.explore").joinpath("assets", name).read_text(encoding="utf-8")


def script_json(data: dict) -> str:
    """JSON safe inside <script type="application/json"> (no "</script>" or "<!--" can end it early)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")  # "<" only in strings


TEXT_SLOT = re.compile(r"\{\{t\.(\w+)\}\}")  # {{t.NAME}} in explore.html: page_text()[NAME], escaped


def render_page(data: dict) -> str:
    """The page in the current language with the assets and `data` inlined; the scripts' words travel in the
    data ("text"). The template's slots are filled before the assets and data go in, so no text inside them
    is ever taken for a slot."""
    text = page_text()
    html = TEXT_SLOT.sub(lambda m: escape(text[m.group(1)], quote=False), asset("explore.html"))
    return (html.replace("{{lang}}", html_lang())
            .replace("{{css}}", asset("explore.css"))
            .replace("{{js}}", "\n".join(asset(n) for n in ASSETS[1:]))
            .replace("{{data}}", script_json({**data, "text": text})))


def page_data(s: Session, mode: str) -> dict:
    """What the page starts with: the model's description, the toggles' choices and the run's curves."""
    return {"mode": mode, "info": s.info(), "curves": curves(s.cfg, s.run_dir),
            "choices": {"heads": head_choices(s.demo.d_model), "seq_len": seq_len_choices(s.demo)}}


def demo_key(seq_len: int, heads: int, scale: bool, causal: bool) -> str:
    return f"{seq_len}|{heads}|{int(scale)}|{int(causal)}"


def static_demo(s: Session) -> dict:
    """Every setting of the demo's toggles: {"shared": {seq_len: ...}, "combos": {demo_key: ...}}."""
    shared, combos = {}, {}
    for seq_len in seq_len_choices(s.demo):
        for heads in head_choices(s.demo.d_model):
            for scale in (True, False):
                for causal in (False, True):
                    r = demo_equation(s.demo, seq_len, heads, scale, causal)
                    shared[str(seq_len)] = r["shared"]
                    combos[demo_key(seq_len, heads, scale, causal)] = r["combo"]
    return {"shared": shared, "combos": combos}


def static_data(s: Session) -> dict:
    """The static file's data: the demo's toggles precomputed, the first examples translated, and eq. (1)
    in every layer's attention modules for the first example (the model's own masks, scaling on)."""
    data = page_data(s, "static")
    data["demo"] = static_demo(s)
    sentences = s.examples[:STATIC_EXAMPLES]
    data["translations"] = [translate(s, text) for text in sentences]
    data["model_equations"] = {}
    if sentences:
        for kind in KINDS:
            for layer in range(s.cfg.model.num_layers):
                r = model_equation(s, sentences[0], kind, layer, True, kind == "decoder_self")
                data["model_equations"][f"{kind}|{layer}"] = r
    return data
