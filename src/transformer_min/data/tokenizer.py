"""One shared subword vocabulary (sentencepiece BPE or unigram), section 3.4 / 5.1.

Source and target share the vocabulary, so three-way weight tying works. Ids: PAD 0, BOS 1,
EOS 2, UNK 3 (the model's vocab.pad_id/bos_id/eos_id).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from transformer_min.core.i18n import tr

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def train_tokenizer(sentences: list[str], model_path: Path, vocab_size: int,
                    model_type: str = "bpe", where: str = "") -> "Tokenizer":
    """Learn the vocabulary on `sentences` (the training split only) and save it to model_path; `where`: the
    source of data.vocab_size as a refusal's prefix (`core.config.origin_of`)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
            character_coverage=1.0, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
            hard_vocab_limit=False, num_threads=2, minloglevel=2)
    except RuntimeError as e:  # sentencepiece's internal check, e.g. fewer pieces than distinct characters
        from transformer_min.core.errors import DataError

        chars = re.search(r"required_chars\. (\d+) vs (\d+)", str(e))
        if chars:
            raise DataError(tr("{where}data.vocab_size = {vocab_size}: the training text needs {group} pieces for its distinct characters and the special ids alone; fix: raise data.vocab_size to at least {group}").format(where=where, vocab_size=vocab_size, group=chars.group(2))) from None
        reason = str(e).split("] ")[-1].strip()
        raise DataError(tr("{where}data.vocab_size = {vocab_size}, data.tokenizer = {model_type!r}: sentencepiece could not learn the vocabulary ({reason}); fix: change data.vocab_size").format(where=where, vocab_size=vocab_size, model_type=model_type, reason=reason)) from None
    from transformer_min.core.io import atomic_write_bytes

    atomic_write_bytes(model_path, buf.getvalue())
    return Tokenizer(model_path)


VOCAB_HASH_LEN = 12  # hex digits of the sha256 shown and stored: a vocabulary's identity


def vocab_hash(model_path: Path) -> str:
    """A vocabulary's identity: the sha256 of its sentencepiece .model bytes, short form (12 hex digits)."""
    import hashlib

    return hashlib.sha256(Path(model_path).read_bytes()).hexdigest()[:VOCAB_HASH_LEN]


def check_same_vocabulary(model: tuple[str, str], data: tuple[str, str], fix: str) -> None:
    """A DataError when `data` = (hash, what) was encoded with another vocabulary than `model` = (hash, what)
    uses: ids of one subword model read with another decode to noise (a BLEU near 0 with exit 0). An empty
    hash (a checkpoint, cache or export from before the hashes) is not checked."""
    from transformer_min.core.errors import DataError
    from transformer_min.core.i18n import tr

    (m_hash, m_what), (d_hash, d_what) = model, data
    if m_hash and d_hash and m_hash != d_hash:
        raise DataError(tr("vocabulary mismatch: {model} uses the subword vocabulary {m_hash} but {data} is of "
                           "vocabulary {d_hash} (sha256 of each spm.model), so its ids would decode to noise; "
                           "fix: {fix}").format(model=m_what, m_hash=m_hash, data=d_what, d_hash=d_hash, fix=fix))


class Tokenizer:
    """A loaded sentencepiece model: text <-> ids; `hash` is its vocabulary's identity (`vocab_hash`)."""

    def __init__(self, model_path: Path):
        import sentencepiece as spm

        self.path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(model_path))
        self.hash = vocab_hash(self.path)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.sp.decode(ids)

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)
