"""Small parallel data built by the tests themselves (tests never download or read ../shared)."""

import gzip
import random

import pytest

from transformer_min.core.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig, VocabConfig

WORDS = {"ein": "a", "mann": "man", "frau": "woman", "hund": "dog", "kind": "child", "sieht": "sees",
         "hat": "has", "den": "the", "ball": "ball", "roten": "red", "großen": "big", "und": "and",
         "läuft": "runs", "schnell": "fast", "im": "in the", "park": "park", "."
         : "."}


def make_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """German-like source, English-like target: a word-by-word dictionary translation."""
    rng = random.Random(seed)
    subjects, objects = ["ein mann", "eine frau", "ein hund", "ein kind"], ["den ball", "den roten ball", "den großen hund"]
    pairs = []
    for _ in range(n):
        if rng.random() < 0.5:
            de = f"{rng.choice(subjects)} {rng.choice(['sieht', 'hat'])} {rng.choice(objects)} ."
        else:
            de = f"{rng.choice(subjects)} läuft {rng.choice(['schnell', 'im park'])} ."
        en = " ".join(WORDS.get(w, {"eine": "a"}.get(w, w)) for w in de.split())
        pairs.append((de, en))
    return pairs


def write_split(root, split, pairs, gz=True, track="tok"):
    (root / track).mkdir(parents=True, exist_ok=True)
    for lang, idx in (("de", 0), ("en", 1)):
        name = f"{split}.lc.norm.tok.{lang}" if track == "tok" else f"{split}.{lang}"
        text = "".join(p[idx] + "\n" for p in pairs)
        if gz:
            with gzip.open(root / track / (name + ".gz"), "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            (root / track / name).write_text(text, encoding="utf-8")


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "multi30k"
    write_split(root, "train", make_pairs(200, 1))
    write_split(root, "val", make_pairs(30, 2), gz=False)  # plain text works too
    write_split(root, "test_2016_flickr", make_pairs(20, 3))
    return root


@pytest.fixture
def data_config(tmp_path, corpus):
    def make(**train):
        t = dict(task="translation", steps=60, batch_tokens=400, warmup_steps=30, lr_factor=1.0,
                 eval_interval=1000, checkpoint_interval=20, keep_last=5, out_dir=str(tmp_path / "runs"),
                 name="tiny_mt", seed=3, device="cpu")
        t.update(train)
        return Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, max_len=64),
                      vocab=VocabConfig(src_size=60, tgt_size=60),
                      data=DataConfig(data_dir=str(corpus), vocab_size=60, max_len=40),
                      decode=DecodeConfig(beam_size=2), train=TrainConfig(**t))
    return make
