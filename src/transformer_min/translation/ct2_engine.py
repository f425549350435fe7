"""Decoding with CTranslate2 (`--engine ctranslate2 --model DIR`): a model written by `tmin export
--ctranslate2`, searched by CTranslate2 and ranked as section 6.1 ranks.

CTranslate2's beam search scores a hypothesis by log P / |Y|^alpha; the paper's (GNMT's, through
tensor2tensor) is log P / ((5 + |Y|) / 6)^alpha. So the engine asks for the `beam` best hypotheses,
recovers each one's log P from CTranslate2's score, and re-ranks them by the paper's penalty
(`rerank`). |Y| counts EOS in both. Greedy decoding needs no re-ranking.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformer_min.core.config import Config
from transformer_min.core.errors import ConfigError
from transformer_min.data.tokenizer import Tokenizer, check_same_vocabulary
from transformer_min.translation.ct2_export import CONFIG_FILE, SPM_FILE, require_ctranslate2, vocabulary
from transformer_min.core.i18n import tr

COMPUTE_TYPES = ("default", "float32", "int8", "int8_float32", "float16", "bfloat16", "int8_bfloat16")


def rerank(hypotheses: list[list[str]], scores: list[float], alpha: float, limit: int) -> int:
    """Index of the best of CTranslate2's n-best list under the paper's length penalty.

    CTranslate2 returns score = log P / n^alpha with n = |Y| + 1 (EOS counted) for a hypothesis that ended,
    n = |Y| for one cut at `limit` tokens; log P is recovered from it and divided by ((5 + n) / 6)^alpha."""
    def paper(i: int) -> float:
        n = len(hypotheses[i]) + (len(hypotheses[i]) < limit)
        log_p = scores[i] * n ** alpha
        return log_p / ((5 + n) / 6) ** alpha

    return max(range(len(hypotheses)), key=paper)


@dataclass
class CT2Model:
    """A loaded export: the CTranslate2 translator, our config and subword model, and the id <-> piece maps."""

    translator: object
    cfg: Config
    tokenizer: Tokenizer
    path: Path
    pieces: list[str]
    ids: dict[str, int]
    compute_type: str

    def translate_ids(self, src_lists: list[list[int]], beam_size: int, alpha: float, max_len_offset: int,
                      batch_size: int = 100, skip: set[int] = frozenset()) -> list[list[int]]:
        """Like translation.translate.translate_ids: source ids (no EOS) in length-sorted batches -> output ids
        (no BOS, cut before EOS); beam 1 is greedy, a wider beam is re-ranked by the paper's penalty."""
        eos = self.pieces[self.cfg.vocab.eos_id]
        order = sorted((i for i in range(len(src_lists)) if i not in skip), key=lambda i: len(src_lists[i]))
        out: list[list[int]] = [[] for _ in src_lists]
        for k in range(0, len(order), batch_size):
            idx = order[k:k + batch_size]
            limits = [min(len(src_lists[i]) + 1 + max_len_offset, self.cfg.model.max_len - 1) for i in idx]
            source = [[self.pieces[t] for t in src_lists[i]] + [eos] for i in idx]
            results = self.translator.translate_batch(
                source, beam_size=beam_size, num_hypotheses=beam_size, length_penalty=alpha if beam_size > 1 else 0,
                return_scores=beam_size > 1, max_decoding_length=max(limits), max_input_length=0)
            for i, limit, r in zip(idx, limits, results):
                best = rerank(r.hypotheses, r.scores, alpha, limit) if beam_size > 1 else 0
                out[i] = [self.ids[p] for p in r.hypotheses[best][:limit]]
        return out

    def log_probs(self, src: list[int], tgt: list[int]) -> list[float]:
        """log P of each token of `tgt` (no BOS) and of the EOS after it, given `src` (no EOS): teacher forcing."""
        eos = self.pieces[self.cfg.vocab.eos_id]
        r = self.translator.score_batch([[self.pieces[t] for t in src] + [eos]], [[self.pieces[t] for t in tgt]])
        return list(r[0].log_probs)


def load_ct2_model(model_dir: str | Path, compute_type: str = "default", threads: int | None = None) -> CT2Model:
    """Open a `tmin export --ctranslate2` directory on the CPU; `compute_type` int8 quantises at load time."""
    ctranslate2 = require_ctranslate2()
    from transformer_min.core.config import config_from_dict

    path = Path(model_dir)
    if compute_type not in COMPUTE_TYPES:
        raise ConfigError(tr("--compute-type {compute_type!r}: expected one of {items}").format(compute_type=compute_type, items=', '.join(COMPUTE_TYPES)))
    missing = [f for f in ("model.bin", CONFIG_FILE, SPM_FILE) if not (path / f).is_file()]
    if missing:
        raise ConfigError(tr("--model {path}: not a tmin export (missing {items}); fix: make one with tmin export --ctranslate2 --checkpoint RUN --out DIR").format(path=path, items=', '.join(missing)))
    try:
        meta = json.loads((path / CONFIG_FILE).read_text())
        cfg = config_from_dict(meta["config"], source=f"checkpoint {meta.get('checkpoint', path)} (exported to {path})")
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(tr("--model {path}: {CONFIG_FILE} is unreadable ({e}); fix: export the checkpoint again").format(path=path, CONFIG_FILE=CONFIG_FILE, e=e)) from None
    import torch

    try:
        translator = ctranslate2.Translator(str(path), device="cpu", compute_type=compute_type,
                                            inter_threads=1, intra_threads=threads or torch.get_num_threads())
    except (RuntimeError, ValueError, IndexError, OSError) as e:  # IndexError: a variable missing in model.bin
        raise ConfigError(tr("--model {path}: CTranslate2 could not load it ({e}); fix: export the checkpoint again with this ctranslate2 version").format(path=path, e=e)) from None
    tokenizer = Tokenizer(path / SPM_FILE)
    check_same_vocabulary((meta.get("vocab") or "", f"the export {path} (model.bin)"),
                          (tokenizer.hash, str(path / SPM_FILE)),
                          "put back the export's own spm.model, or export the checkpoint again: tmin export "
                          "--ctranslate2 --checkpoint RUN --out DIR --force")
    pieces = vocabulary(tokenizer.sp, max(cfg.vocab.src_size, cfg.vocab.tgt_size))
    return CT2Model(translator, cfg, tokenizer, path, pieces, {p: i for i, p in enumerate(pieces)}, compute_type)
