"""The page itself: its assets ship as package data, its data cannot end the script tag early, and the static
file's data holds every toggle of the demo and every layer of the model."""

from __future__ import annotations

import json
import re

from tests.conftest import REPO_ROOT
from transformer_min.viz.explore.equation import head_choices, seq_len_choices
from transformer_min.viz.explore.page import ASSETS, asset, render_page, script_json, static_data


def test_assets_are_package_data():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"viz/explore/assets/*"' in pyproject
    for name in ("explore.html", *ASSETS):
        assert asset(name).strip()


def test_script_json_cannot_close_the_script_tag():
    text = script_json({"sentence": "</script><script>alert(1)</script> <!-- x"})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text)["sentence"] == "</script><script>alert(1)</script> <!-- x"


def test_static_data_holds_every_toggle_and_layer(random_session):
    data = static_data(random_session)
    demo = random_session.demo
    assert len(data["demo"]["combos"]) == len(seq_len_choices(demo)) * len(head_choices(demo.d_model)) * 4
    assert set(data["model_equations"]) == {f"{k}|{layer}" for k in ("encoder", "decoder_self", "cross")
                                            for layer in range(2)}
    assert [t["sentence"] for t in data["translations"]] == random_session.examples[:3]
    html = render_page(data)
    assert html.count("<script") == 2 and not re.search(r"https?://", html.split('id="explore-data"')[0])


def test_random_weights_feed_the_reversed_source_and_say_so(random_session, reverse_session):
    from transformer_min.viz.explore.sentence import translate

    tr = translate(random_session, "3 4 5")
    assert tr["target"]["ids"] == [5, 4, 3] and "random weights" in tr["decoded_by"]
    assert translate(reverse_session, "3 4 5")["decoded_by"] == "beam search"
