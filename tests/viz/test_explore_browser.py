"""tmin explore in a real browser: headless Chromium driven by selenium (skipped when chromium or
chromedriver is absent). The page loads with no console errors and draws a heatmap for every layer and head;
typing a sentence updates them; the toggles change the numbers shown; a screenshot is kept."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from transformer_min.cli.main import main
from transformer_min.viz.explore.sentence import KINDS

SMALL_TOML = """
[attention]
d_model = 64
num_heads = 4
seq_len = 6
"""


def wait(browser, script: str, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(lambda b: b.execute_script(script))


def open_page(browser, url: str) -> None:
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(url)
    wait(browser, "return document.body.dataset.ready === '1'")


def console_errors(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def missing_heatmaps(browser, layers: int, heads: int) -> list[str]:
    """kind/layer/head triples (and head means) without a canvas.heatmap in the page."""
    missing = []
    for kind in KINDS:
        for layer in range(layers):
            for head in [*map(str, range(heads)), "mean"]:
                sel = f'canvas.heatmap[data-kind="{kind}"][data-layer="{layer}"][data-head="{head}"]'
                if not browser.execute_script(f"const c = document.querySelector('{sel}'); return !!c && c.width > 0"):
                    missing.append(f"{kind}/{layer}/{head}")
    return missing


def page_matrix(browser, expression: str) -> np.ndarray:
    """A matrix of the page's own data (`STATE...` in the page), decoded here."""
    m = browser.execute_script(f"return {expression}")
    return np.frombuffer(base64.b64decode(m["b64"]), dtype="<f4").reshape(m["shape"])


def test_static_file_needs_no_network_and_draws_every_layer_and_head(browser, reverse_run, tmp_path, artifact_dir,
                                                                     restore_logging):
    (tmp_path / "small.toml").write_text(SMALL_TOML, encoding="utf-8")
    out = tmp_path / "explore.html"
    assert main(["--config", str(tmp_path / "small.toml"), "explore", "--checkpoint", str(reverse_run),
                 "--static", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", html), "the file refers to another file"
    assert "<script src" not in html and "<link rel=\"stylesheet\"" not in html
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                 "downloadThroughput": -1, "uploadThroughput": -1})
    try:
        open_page(browser, out.as_uri())
        assert console_errors(browser) == []
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
        assert missing_heatmaps(browser, 2, 4) == []
        assert browser.execute_script("return document.querySelectorAll('#eq-steps canvas.heatmap').length") == 14
        browser.find_element("css selector", '.tab[data-page="model"]').click()
        browser.save_screenshot(str(artifact_dir / "explore-static.png"))
    finally:
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                                     "downloadThroughput": -1, "uploadThroughput": -1})


def test_typing_a_sentence_updates_the_maps(browser, serve, reverse_session, artifact_dir):
    open_page(browser, serve(reverse_session))
    assert console_errors(browser) == []
    assert missing_heatmaps(browser, 2, 4) == []
    browser.find_element("css selector", '.tab[data-page="model"]').click()
    box = browser.find_element("id", "tr-input")
    box.clear()
    box.send_keys("3 4 5 6 7 8 9")
    browser.find_element("id", "tr-go").click()
    wait(browser, "return STATE.translation.sentence === '3 4 5 6 7 8 9'")
    tokens = [e.text for e in browser.find_elements("css selector", "#tr-output .tok.tgt")]
    assert tokens == "9 8 7 6 5 4 3 </s>".split()
    assert missing_heatmaps(browser, 2, 4) == []
    cross = page_matrix(browser, "STATE.translation.mean.cross[STATE.translation.mean.cross.length - 1]")
    assert [int(np.argmax(cross[i])) for i in range(7)] == list(range(6, -1, -1))  # the anti-diagonal
    browser.find_elements("css selector", "#tr-output .tok.tgt")[0].click()  # "9": its source is the last symbol
    shades = [float(e.get_attribute("title").split()[-1]) for e in
              browser.find_elements("css selector", "#tr-output .src-tok")]
    assert int(np.argmax(shades)) == 6
    browser.save_screenshot(str(artifact_dir / "explore.png"))
    box.clear()
    box.send_keys("3 x 5")
    browser.find_element("id", "tr-go").click()
    wait(browser, "return !document.getElementById('error').hidden")
    assert "'x' is not a token id" in browser.find_element("id", "error").text


STEP = "document.querySelector('#eq-steps canvas[data-step=\"{}\"]').parentNode"  # a step's heatmap box


def step_shape(browser, step: int) -> str:
    """The shape and range shown above step `step` (8: the mask, 10: the softmax)."""
    return browser.execute_script(f"return {STEP.format(step)}.querySelector('.shape').textContent")


def test_the_toggles_change_the_numbers_shown(browser, serve, random_session):
    from selenium.webdriver.support.ui import Select

    open_page(browser, serve(random_session))
    assert browser.find_element("id", "banner").text.startswith("Random weights")
    summary, softmax = browser.find_element("id", "eq-summary").text, step_shape(browser, 10)
    browser.find_element("id", "eq-scale").click()  # off: footnote 4
    wait(browser, f"return document.getElementById('eq-summary').textContent !== {summary!r}")
    assert "unscaled" in browser.find_element("id", "eq-summary").text and step_shape(browser, 10) != softmax
    assert "min 1" in step_shape(browser, 8)  # no mask yet
    browser.find_element("id", "eq-causal").click()
    wait(browser, f"return {STEP.format(8)}.textContent.includes('min 0')")
    Select(browser.find_element("id", "eq-heads")).select_by_value("1")
    wait(browser, "return document.getElementById('eq-head').options.length === 1")
    assert "d_k = 64" in browser.find_element("id", "eq-summary").text
    Select(browser.find_element("id", "eq-seqlen")).select_by_value("12")
    wait(browser, "return document.getElementById('eq-summary').textContent.includes('seq_len 12')")
    assert step_shape(browser, 10).startswith("(12, 12)")
    assert console_errors(browser) == []


def visible_text_of_each_page(browser) -> dict[str, str]:
    """The text a reader sees on each of the three pages (innerText: hidden elements left out)."""
    out = {}
    for page in ("equation", "model", "training"):
        browser.find_element("css selector", f'.tab[data-page="{page}"]').click()
        out[page] = browser.execute_script("return document.body.innerText")
    return out


def test_the_chinese_page_speaks_chinese_everywhere(browser, serve, reverse_session, tmp_path, artifact_dir):
    """--lang zh, served (a trained run: its curves too) and --static (random weights: the banner): every page's
    visible text, the toggles' summary, the maps' words and error replies are Chinese (the detector finds English
    on the English page)."""
    from tests.cli.english_prose import prose_lines
    from transformer_min.core.i18n import set_language

    open_page(browser, serve(reverse_session))
    english = visible_text_of_each_page(browser)
    assert all(prose_lines(text) for text in english.values()), "the detector finds nothing on the English page"
    set_language("zh")
    open_page(browser, serve(reverse_session))
    assert browser.execute_script("return document.documentElement.lang").startswith("zh")
    assert console_errors(browser) == []
    chinese = visible_text_of_each_page(browser)
    assert {page: prose_lines(text) for page, text in chinese.items()} == {p: [] for p in chinese}
    assert "编码器-解码器注意力" in chinese["model"] and "学习率" in chinese["training"]
    assert browser.execute_script("return document.querySelectorAll('#plots svg.plot').length") >= 3
    browser.find_element("css selector", '.tab[data-page="equation"]').click()
    summary = browser.find_element("id", "eq-summary").text
    browser.find_element("id", "eq-scale").click()
    wait(browser, f"return document.getElementById('eq-summary').textContent !== {summary!r}")
    assert "未缩放" in browser.find_element("id", "eq-summary").text
    assert "最小" in step_shape(browser, 8)
    browser.find_element("css selector", '.tab[data-page="model"]').click()
    browser.save_screenshot(str(artifact_dir / "explore-zh.png"))
    box = browser.find_element("id", "tr-input")
    box.clear()
    box.send_keys("3 x 5")
    browser.find_element("id", "tr-go").click()
    wait(browser, "return !document.getElementById('error').hidden")
    error = browser.find_element("id", "error").text
    assert "'x'" in error and "词元" in error and prose_lines(error) == [], error

    (tmp_path / "small.toml").write_text(SMALL_TOML, encoding="utf-8")
    out = tmp_path / "explore-zh.html"
    assert main(["--config", str(tmp_path / "small.toml"), "explore", "--lang", "zh", "--static", str(out)]) == 0
    open_page(browser, out.as_uri())
    assert browser.execute_script("return document.documentElement.lang").startswith("zh")
    chinese = visible_text_of_each_page(browser)
    assert all(prose_lines(text) == [] for text in chinese.values()) and "随机权重" in chinese["model"]
    browser.find_element("css selector", '.tab[data-page="model"]').click()
    box = browser.find_element("id", "tr-input")
    box.clear()
    box.send_keys("4 4 4")  # not one of the precomputed examples
    browser.find_element("id", "tr-go").click()
    wait(browser, "return !document.getElementById('error').hidden")
    error = browser.find_element("id", "error").text
    assert "静态文件" in error and prose_lines(error) == [], error
    assert console_errors(browser) == []
