"""Corpus BLEU (Papineni et al., 2002) and chrF with sacrebleu, the metrics of section 6.1 and Table 2."""

from __future__ import annotations


def score(hyps: list[str], refs: list[str], track: str) -> dict:
    """Corpus BLEU and chrF with sacrebleu against one reference per sentence."""
    return score_refs(hyps, [refs], track)


def score_refs(hyps: list[str], ref_sets: list[list[str]], track: str) -> dict:
    """Corpus BLEU and chrF with sacrebleu against one or more references per sentence (`ref_sets`: one
    list per reference file); tokenize='none' on the pre-tokenized track."""
    import sacrebleu

    # the tok track is tokenized by the dataset's own script: score it as is (no detokenize warning)
    bleu = sacrebleu.metrics.BLEU(tokenize="none" if track == "tok" else "13a", force=track == "tok")
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(hyps, ref_sets)
    c = chrf.corpus_score(hyps, ref_sets)
    return {"bleu": b.score, "chrf": c.score, "bp": b.bp, "sys_len": b.sys_len, "ref_len": b.ref_len,
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}
