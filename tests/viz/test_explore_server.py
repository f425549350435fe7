"""The server's JSON endpoints through urllib (a server on 127.0.0.1, port 0, in a thread): answers checked
against NumPy, eq. (3) written out and the reverse task's expected alignment; bad input is a 4xx with a
message, never a 500."""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from transformer_min.viz.explore.tensors import unpack


def get(url: str, path: str, **params) -> tuple[int, dict | str]:
    full = url.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(full, timeout=60) as r:
            body = r.read().decode("utf-8")
            return r.status, json.loads(body) if r.headers["Content-Type"] == "application/json" else body
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode("utf-8"))


def test_the_page_and_info_answer_on_loopback(serve, random_session):
    url = serve(random_session)
    assert url.startswith("http://127.0.0.1:")
    status, page = get(url, "/")
    assert status == 200 and 'id="explore-data"' in page and "<script src" not in page
    status, info = get(url, "/api/info")
    assert status == 200 and info["info"]["random"] is True and info["info"]["num_layers"] == 2
    assert info["choices"]["heads"] == [1, 2, 4, 8] and 6 in info["choices"]["seq_len"]


def test_reverse_cross_attention_is_anti_diagonal(serve, reverse_session):
    """The bar of issue 16: on the reverse task the output's i-th token is the source's (n-1-i)-th, and the
    last layer's cross-attention (mean over heads), read from the page's data, peaks there in every row."""
    url = serve(reverse_session)
    for sentence in ("3 4 5 6 7 8 9", "10 9 3 5 4"):
        status, tr = get(url, "/api/translate", sentence=sentence)
        assert status == 200, tr
        source = [int(t) for t in sentence.split()]
        n = len(source)
        assert tr["target"]["ids"] == source[::-1]
        assert tr["source"]["labels"][-1] == "</s>" and tr["target"]["in_labels"][0] == "<s>"
        cross = unpack(tr["mean"]["cross"][-1])  # (T, S): rows = predicted tokens + EOS
        assert cross.shape == (n + 1, n + 1)
        for i in range(n):
            assert int(np.argmax(cross[i])) == n - 1 - i, (sentence, i, cross[i])


def test_translate_weights_are_distributions_and_the_decoder_is_causal(serve, reverse_session):
    url = serve(reverse_session)
    _, tr = get(url, "/api/translate", sentence="3 5 7")
    for kind in ("encoder", "decoder_self", "cross"):
        for layer, heads in enumerate(tr["attention"][kind]):
            stack = np.stack([unpack(h) for h in heads])  # (H, Lq, Lk)
            np.testing.assert_allclose(stack.sum(-1), 1.0, atol=1e-5)
            np.testing.assert_allclose(unpack(tr["mean"][kind][layer]), stack.mean(0), atol=1e-6)
    dec = np.stack([unpack(h) for h in tr["attention"]["decoder_self"][0]])
    assert np.all(dec[:, np.triu_indices(dec.shape[-1], 1)[0], np.triu_indices(dec.shape[-1], 1)[1]] == 0)


def test_toggles_are_recomputed_by_the_server(serve, random_session):
    url = serve(random_session)
    _, on = get(url, "/api/equation", source="demo", seq_len=6, heads=1, scale=1, causal=0)
    _, off = get(url, "/api/equation", source="demo", seq_len=6, heads=1, scale=0, causal=0)
    _, causal = get(url, "/api/equation", source="demo", seq_len=8, heads=4, scale=1, causal=1)
    scores = unpack(on["combo"]["heads"][0]["scores"])
    np.testing.assert_allclose(unpack(on["combo"]["heads"][0]["scaled"]), scores / math.sqrt(64), rtol=1e-6)
    np.testing.assert_array_equal(unpack(off["combo"]["heads"][0]["scaled"]), scores)
    assert off["combo"]["saturation"] > on["combo"]["saturation"]
    assert len(causal["combo"]["heads"]) == 4 and unpack(causal["shared"]["X"]).shape == (8, 64)
    np.testing.assert_array_equal(unpack(causal["combo"]["heads"][2]["mask"]), np.tril(np.ones((8, 8))))
    _, model = get(url, "/api/equation", source="model", sentence="3 4 5", kind="decoder_self", layer=1, causal=1)
    assert model["kind"] == "decoder_self" and len(model["combo"]["heads"]) == 4


def test_curves_follow_eq3(serve, reverse_session):
    url = serve(reverse_session)
    _, cv = get(url, "/api/curves")
    assert cv["available"] and len(cv["loss"]) == 1000 and cv["evals"]["eval_accuracy"]
    for (step, lr), (step3, lr3) in zip(cv["lr"], cv["lr_eq3"]):
        assert step == step3
        assert lr3 == pytest.approx(1.0 * 32 ** -0.5 * min(step ** -0.5, step * 100 ** -1.5), rel=1e-12)
        assert lr == pytest.approx(lr3, rel=1e-6)  # the optimizer's logged lr is eq. (3)
    _, none = get(serve(dataclasses.replace(reverse_session, run_dir=None)), "/api/curves")  # no run folder
    assert none["available"] is False and "--checkpoint" in none["note"]


BAD = [
    ("/api/translate", {"sentence": ""}, 400, "empty"),
    ("/api/translate", {"sentence": "   "}, 400, "empty"),
    ("/api/translate", {"sentence": "3 x 5"}, 400, "'x' is not a token id"),
    ("/api/translate", {"sentence": "3 11 5"}, 400, "token 11 is unknown"),
    ("/api/translate", {"sentence": "3 1 5"}, 400, "token 1 is unknown"),
    ("/api/translate", {"sentence": " ".join(["3"] * 64)}, 400, "shorten it"),
    ("/api/equation", {"source": "demo", "heads": "3"}, 400, "heads = 3: choose one of 1, 2, 4, 8"),
    ("/api/equation", {"source": "demo", "seq_len": "5"}, 400, "seq_len = 5"),
    ("/api/equation", {"source": "demo", "seq_len": "six"}, 400, "expected an integer"),
    ("/api/equation", {"source": "demo", "scale": "maybe"}, 400, "expected 0 or 1"),
    ("/api/equation", {"source": "elsewhere"}, 400, "choose one of demo, model"),
    ("/api/equation", {"source": "model", "sentence": "3 4", "layer": "7"}, 400, "layer = 7"),
    ("/api/equation", {"source": "model", "sentence": "3 4", "kind": "bogus"}, 400, "kind = 'bogus'"),
    ("/api/equation", {"source": "model", "sentence": ""}, 400, "empty"),
    ("/api/nothing", {}, 404, "the page is at /"),
]


@pytest.mark.parametrize("path,params,code,message", BAD, ids=[f"{p}-{m[:20]}" for p, _, _, m in BAD])
def test_bad_input_is_a_4xx_with_a_message(serve, random_session, path, params, code, message):
    status, body = get(serve(random_session), path, **params)
    assert status == code and message in body["error"], body
    assert "Traceback" not in body["error"]


def test_translation_run_text_vocabulary(serve, translation_run):
    from transformer_min.core.config import Config
    from transformer_min.viz.explore.session import open_session

    s = open_session(Config(), str(translation_run / "checkpoints" / "step_0000002.pt"))
    assert s.vocab.kind == "text" and len(s.examples) == 8 and s.run_dir == translation_run
    url = serve(s)
    status, tr = get(url, "/api/translate", sentence=s.examples[0])
    assert status == 200 and tr["source"]["labels"][-1] == "</s>"
    assert "".join(tr["source"]["labels"][:-1]).replace("\u2581", " ").strip() == s.examples[0]
    status, body = get(url, "/api/translate", sentence="ein hund ✈ sieht")
    assert status == 400 and "unknown tokens" in body["error"] and "✈" in body["error"]


def test_a_port_in_use_is_a_message_naming_it(random_session):
    from transformer_min.core.errors import ConfigError
    from transformer_min.viz.explore.server import make_server

    first = make_server(random_session, "127.0.0.1", 0)
    try:
        port = first.server_address[1]
        with pytest.raises(ConfigError, match=f"--port {port}: cannot listen there .*choose another --port"):
            make_server(random_session, "127.0.0.1", port)
    finally:
        first.server_close()


def test_the_command_serves_on_loopback_and_prints_the_url(tmp_path):
    """`tmin explore --port 0` (random weights, small [model]) answers on 127.0.0.1 at the URL it prints."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT, subprocess_env

    (tmp_path / "c.toml").write_text("[model]\nd_model = 32\nnum_heads = 4\nd_ff = 64\nnum_layers = 1\n"
                                     "[attention]\nd_model = 32\n", encoding="utf-8")
    env = {**subprocess_env(), "PYTHONPATH": str(REPO_ROOT / "src"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "transformer_min", "--config", "c.toml", "explore", "--port", "0"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "serving http://127.0.0.1:" in line, line + proc.stderr.read() if proc.poll() is not None else line
        url = line.split("serving ")[1].split()[0]
        status, page = get(url, "/")
        assert status == 200 and 'id="explore-data"' in page
        status, info = get(url, "/api/info")
        assert status == 200 and info["info"]["random"] and info["info"]["num_layers"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
