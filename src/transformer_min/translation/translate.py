"""Text in, text out (`tmin translate`): a checkpoint, its subword model, and beam search (section 6.1).

Input is normalised as the training data was (`translation.moses`), encoded with the run's shared
vocabulary, decoded greedily or with beam search in length-sorted batches, and detokenised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import TextIO

import torch

from transformer_min.core.config import Config
from transformer_min.core.errors import CheckpointError, ConfigError
from transformer_min.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, check_same_vocabulary
from transformer_min.model.inference import InferenceWeights
from transformer_min.translation.ct2_engine import CT2Model, load_ct2_model
from transformer_min.translation.hf_engine import HFModel, check_hf_options, load_hf_model
from transformer_min.translation.moses import normalize_input
from transformer_min.core.i18n import tr

Overrides = Callable[[Config], Config]  # a checkpoint's config -> the config used
ENGINES = ("torch", "ctranslate2", "hf")

log = logging.getLogger(__name__)


@dataclass
class Translator:
    """A translation model ready to decode: model (eval mode), its config, the run's subword model,
    the checkpoint file, and the beam size and length penalty alpha (section 6.1) to use. With
    `engine` (--engine ctranslate2) the export decodes instead of `model` (None), and `path` is its directory."""

    model: torch.nn.Module | None
    cfg: Config
    tokenizer: Tokenizer
    path: Path
    beam: int
    alpha: float
    engine: CT2Model | HFModel | None = None
    precision: str = "fp32"  # of our decoding's products: decode.precision resolved (core/decode_precision.py)
    _weights: InferenceWeights | None = field(default=None, init=False, repr=False)

    @property
    def vocab(self) -> str:
        """The hash of the subword vocabulary this model's ids are of (`data.tokenizer.vocab_hash`)."""
        return self.tokenizer.hash

    @property
    def out_dir(self) -> Path:
        """Where hypotheses go by default: the run directory of the checkpoint, or the export directory."""
        return self.path if self.engine is not None else self.path.parent.parent

    @property
    def label(self) -> str:
        """The model in a file name: the checkpoint's stem (step_0001456, averaged) or ct2 + compute type."""
        if isinstance(self.engine, HFModel):
            return self.engine.label
        return f"ct2_{self.engine.compute_type}" if self.engine is not None else self.path.stem

    def translate_ids(self, src_lists: list[list[int]], alpha: float, search: str, skip: set[int] = frozenset(),
                      batch_size: int = 100) -> list[list[int]]:
        """Source id lists (no EOS) -> output ids, with this translator's beam and engine."""
        offset = self.cfg.decode.max_len_offset
        if self.engine is not None:
            return self.engine.translate_ids(src_lists, self.beam, alpha, offset, batch_size, skip)
        return translate_ids(self.model, src_lists, self.beam, alpha, offset, "cpu", batch_size, skip, search,
                             self.precision, self.step_weights())

    def step_weights(self) -> InferenceWeights | None:
        """The decoder step's weights in `precision` (model/inference.py, model/low_precision.py), made at the
        first translation and kept for the next ones, as CTranslate2 quantises once at load: a Translator's model
        is a loaded checkpoint in eval mode, not trained further (int8's prepacking took 0.2 s a call for the
        3+3 model). Made again when `precision` changes; None for a model in training mode (the module path)."""
        from transformer_min.decoding.search import inference_weights

        if self._weights is None or self._weights.precision != self.precision:
            self._weights = inference_weights(self.model, self.precision)
        return self._weights


@dataclass
class Translation:
    """Translations of `lines`; with attention, the last decoder layer's cross-attention of the first
    sentence (H, T, S) and its row (output pieces + </s>) and column (source pieces + </s>) labels."""

    lines: list[str]
    hyps: list[str]
    heads: torch.Tensor | None = None
    rows: list[str] | None = None
    cols: list[str] | None = None


def check_engine(engine: str, checkpoint: str | None, model_dir: str | None, search: str | None,
                 precision: str | None = None) -> None:
    """--engine torch needs --checkpoint, --engine ctranslate2 needs --model (an export); named before loading.
    --precision is our model's (the engines have --compute-type)."""
    if engine not in ENGINES:
        raise ConfigError(tr("--engine {engine!r}: expected one of {items}").format(engine=engine, items=', '.join(ENGINES)))
    if precision is not None and engine != "torch":
        raise ConfigError(tr("--precision {precision}: chooses our model's arithmetic (--engine torch); fix: drop "
                             "--precision, and with --engine ctranslate2 use --compute-type (int8, bfloat16, ...)"
                             ).format(precision=precision))
    if engine == "torch" and not checkpoint:
        hint = tr(" (--model is for --engine ctranslate2)") if model_dir else ""
        raise ConfigError(tr("--checkpoint: required with --engine torch{hint}; fix: --checkpoint runs/<name>").format(hint=hint))
    if engine == "hf":
        check_hf_options(checkpoint, model_dir, search)
    if engine == "ctranslate2":
        if not model_dir:
            raise ConfigError(tr("--model: required with --engine ctranslate2; fix: tmin export --ctranslate2 --checkpoint RUN --out DIR, then --model DIR"))
        if checkpoint:
            raise ConfigError(tr("--checkpoint and --engine ctranslate2 exclude each other: the export (--model) is the model"))
        if search == "slots":
            raise ConfigError(tr("--search slots: CTranslate2 runs its own beam search, re-ranked by the paper's length penalty; fix: drop --search, or use --engine torch"))


def load_translator(checkpoint: str | None, beam: int | None = None, alpha: float | None = None,
                    overrides: Overrides | None = None, engine: str = "torch", model_dir: str | None = None,
                    compute_type: str = "default", precision: str | None = None) -> Translator:
    """The model and subword model of a translation checkpoint (a file, or a run directory's newest), or with
    engine "ctranslate2" of an export directory `model_dir` (`compute_type` int8: quantised at load);
    beam, alpha and precision default to the checkpoint's decode.beam_size, decode.length_penalty and
    decode.precision (`precision`: --precision). `overrides` maps the checkpoint's config to the one used
    (the command's --set decode.KEY, for example)."""
    from transformer_min.decoding.search import check_beam
    from transformer_min.model.saved import checkpoint_config, model_from_state, read_checkpoint

    if engine in ("ctranslate2", "hf"):
        m = (load_hf_model if engine == "hf" else load_ct2_model)(model_dir, compute_type)
        cfg = overrides(m.cfg) if overrides else m.cfg
        size = cfg.decode.beam_size if beam is None else beam
        check_beam(size, cfg.vocab.tgt_size, "decode.beam_size" if beam is None else "--beam")
        return Translator(None, cfg, m.tokenizer, m.path, size,
                          cfg.decode.length_penalty if alpha is None else alpha, engine=m)
    state = read_checkpoint(checkpoint)  # read once: the weights and the config both come from it
    state_path = Path(state["path"])
    model, cfg = model_from_state(state), checkpoint_config(state)
    cfg = overrides(cfg) if overrides else cfg
    spm = state_path.parent.parent / "spm.model"
    if not spm.exists():
        raise CheckpointError(tr("{state_path}: no spm.model in its run directory {parent}; translation checkpoints live in runs/<name>/checkpoints/").format(state_path=state_path, parent=spm.parent))
    tokenizer = Tokenizer(spm)
    check_run_vocabulary(state, tokenizer)
    size = cfg.decode.beam_size if beam is None else beam
    check_beam(size, cfg.vocab.tgt_size, "decode.beam_size" if beam is None else "--beam")
    return Translator(model, cfg, tokenizer, state_path, size, cfg.decode.length_penalty if alpha is None else alpha,
                      precision=decode_precision(cfg, precision))


def decode_precision(cfg: Config, precision: str | None) -> str:
    """--precision, else the config's decode.precision, resolved from this CPU's capability, not a timing (auto ->
    bf16 where it has native bf16, AVX512_BF16 or AMX, else fp32: core.hardware.resolve_precision); a bf16 run
    on a CPU without native bf16 warns, int8 without a quantized engine is refused (ConfigError)."""
    from transformer_min.core.decode_precision import resolve_decode_precision

    p = resolve_decode_precision(*((cfg.decode.precision, "decode.precision") if precision is None
                                   else (precision, "--precision")))
    if p.warning:
        log.warning(p.warning)
    if p.used != "fp32" or p.requested != "fp32":
        log.info(tr("decoding in %s: %s"), p.used, p.reason)
    return p.used


def check_run_vocabulary(state: dict, tokenizer: Tokenizer) -> None:
    """The run's spm.model must be the vocabulary the checkpoint was trained with (its recorded hash; a
    checkpoint from before the hash is not checked)."""
    recorded = (state.get("extra") or {}).get("vocab") or ""
    check_same_vocabulary((recorded, f"the checkpoint {state['path']}"), (tokenizer.hash, str(tokenizer.path)),
                          f"put back the run's own spm.model (the data cache it was trained on has it: "
                          f"{Path(state['path']).parent.parent.parent}/data/<hash>/spm.model), or train again")


def too_long(src_lists: list[list[int]], max_len: int, split: str, sources: list[str] | None = None) -> set[int]:
    """Indices of sources the model cannot take (pieces + EOS > model.max_len), each named in a warning:
    they are decoded as empty translations, so the split is still scored on every sentence."""
    skip = {i for i, s in enumerate(src_lists) if len(s) + 1 > max_len}
    for i in sorted(skip)[:5]:
        words = (sources[i] if sources else "").split()
        preview = " ".join(words[:8]) + (" ..." if len(words) > 8 else "")
        log.warning(tr("%s: sentence %d (%r) has %d pieces, more than model.max_len %d allows; it is scored as an empty translation"), split, i + 1, preview, len(src_lists[i]), max_len)
    if len(skip) > 5:
        log.warning(tr("%s: %d sentences in all are over model.max_len %d and scored as empty"), split, len(skip), max_len)
    return skip


def translate_ids(model, src_lists: list[list[int]], beam_size: int, alpha: float, max_len_offset: int,
                  device, batch_size: int = 100, skip: set[int] = frozenset(),
                  search: str = "t2t", precision: str = "fp32",
                  weights: InferenceWeights | None = None) -> list[list[int]]:
    """Decode source id lists (no EOS) in length-sorted batches; greedy when beam_size == 1; `search`:
    decode.search, the beam search of section 6.1 ("t2t") or the earlier one ("slots"); `precision`: of the
    decoder step's products (fp32, bf16 or int8; resolved); `weights`: the step's weights in that precision
    (`Translator.step_weights`), else made from the model as it is now. The indices in `skip` (see `too_long`)
    are not decoded: their translation is empty."""
    order = sorted((i for i in range(len(src_lists)) if i not in skip), key=lambda i: len(src_lists[i]))
    out: list[list[int]] = [[] for _ in src_lists]
    with torch.inference_mode():  # no autograd bookkeeping on any op (less per-op work than no_grad)
        _translate_batches(model, src_lists, order, out, beam_size, alpha, max_len_offset, device, batch_size, search,
                           precision, weights)
    return out


def _translate_batches(model, src_lists, order, out, beam_size, alpha, max_len_offset, device, batch_size,
                       search, precision, weights) -> None:
    from transformer_min.data.batch import pad_sequences
    from transformer_min.decoding.search import beam_search, greedy_decode, inference_weights, strip

    if weights is None or model.training:  # the model's weights now, made once for every batch of this call
        weights = inference_weights(model, precision)
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        src = pad_sequences([src_lists[i] + [EOS_ID] for i in idx], PAD_ID).to(device)  # (B, S)
        if beam_size > 1:
            hyp = beam_search(model, src, BOS_ID, EOS_ID, PAD_ID, beam_size, alpha, max_len_offset,
                              search=search, weights=weights)
        else:
            hyp = greedy_decode(model, src, BOS_ID, EOS_ID, PAD_ID, max_len_offset, weights=weights)
        for i, h in zip(idx, strip(hyp, EOS_ID, PAD_ID)):
            out[i] = h


def input_lines(sentences: list[str] | None, stdin: TextIO) -> list[str]:
    """The sentences given as arguments, else the non-blank lines of stdin; an empty one is an error."""
    lines = sentences or [line for line in stdin.read().splitlines() if line.strip()]
    if not lines:
        raise ConfigError(tr("translate: give sentences as arguments or on stdin"))
    return lines


def check_arguments(sentences: list[str] | None) -> None:
    """An empty argument ("$TEXT" unset) would be "translated" into noise: named before anything loads."""
    blank = next((i for i, line in enumerate(sentences or []) if not line.strip()), None)
    if blank is not None:
        raise ConfigError(tr('translate: sentence {blank} of the arguments is empty; fix: give the text to translate, e.g. tmin translate --checkpoint RUN "ein hund läuft ."').format(blank=blank + 1))


def translate(checkpoint: str | None, sentences: list[str] | None, stdin: TextIO, beam: int | None = None,
              alpha: float | None = None, search: str | None = None, overrides: Overrides | None = None,
              attention: bool = False, engine: str = "torch", model_dir: str | None = None,
              compute_type: str = "default", precision: str | None = None) -> Translation:
    """`tmin translate`: sentences (or stdin lines) -> translations, with the first sentence's
    cross-attention when `attention` (not with --engine ctranslate2). A sentence over model.max_len pieces
    is an error naming it."""
    from transformer_min.decoding.search import cross_attention_heads

    check_arguments(sentences)
    check_engine(engine, checkpoint, model_dir, search, precision)
    if attention and engine != "torch":
        raise ConfigError(tr("--attention/--csv: the cross-attention is drawn from our model; fix: use --engine torch with --checkpoint"))
    t = load_translator(checkpoint, beam, alpha, overrides, engine, model_dir, compute_type, precision)
    cfg, tok = t.cfg, t.tokenizer
    lines = input_lines(sentences, stdin)
    src = tok.encode([normalize_input(line, cfg.data.track, cfg.data.src_lang) for line in lines])
    over = [i for i, s in enumerate(src) if len(s) + 1 > cfg.model.max_len]
    if over:
        raise ConfigError(tr("translate: sentence {over} has {n_src} pieces, more than model.max_len {max_len} allows; fix: split it into shorter sentences").format(over=over[0] + 1, n_src=len(src[over[0]]), max_len=cfg.model.max_len))
    hyps = t.translate_ids(src, t.alpha, search or cfg.decode.search)
    result = Translation(lines, tok.decode(hyps))
    if attention:
        result.heads = cross_attention_heads(t.model, torch.tensor([src[0] + [cfg.vocab.eos_id]]), hyps[0],
                                             cfg.vocab.bos_id, cfg.vocab.eos_id)  # (H, T, S)
        result.rows = [tok.sp.id_to_piece(i) for i in hyps[0]] + ["</s>"]
        result.cols = [tok.sp.id_to_piece(i) for i in src[0]] + ["</s>"]
    return result
