"""Every word the explorer's page shows, through the message catalog (`core.i18n`), so `tmin explore --lang zh`
is Chinese: the HTML's `{{t.NAME}}`, filled when the page is rendered, and the scripts' `T("NAME", {fields})`,
looked up in the page data's "text" (fields in `{braces}` are filled by the script). Formulas and code names
(Q, K, V, d_k, seq_len, W^O) stay as they are, in the template and the scripts.
"""

from __future__ import annotations

from transformer_min.core.i18n import language, tr


def html_lang() -> str:
    """The page's `<html lang>`: the language its words are in."""
    return "zh-CN" if language() == "zh" else "en"


def page_text() -> dict[str, str]:
    """NAME -> the text in the current language (the page's template, its scripts, and its errors)."""
    return {**_template_text(), **_script_text()}


def _template_text() -> dict[str, str]:
    return {
        "title": tr("tmin explore: attention, step by step"),
        "tab_equation": tr("Equation (1), step by step"),
        "tab_model": tr("A trained model"),
        "tab_training": tr("Training"),
        "eq_where": tr("(section 3.2.1, eq. (1)),"),
        "eq_in_heads": tr("in each head of"),
        "eq_section": tr("(section 3.2.2)."),
        "hover": tr("Hover a cell for its value."),
        "source": tr("source"),
        "source_demo": tr("[attention] demo of config.toml"),
        "source_model": tr("the model: one layer"),
        "heads_h": tr("heads h"),
        "attention": tr("attention"),
        "kind_encoder": tr("encoder self"),
        "kind_decoder_self": tr("decoder self"),
        "kind_cross": tr("encoder-decoder"),
        "layer": tr("layer (from 0)"),
        "head_i": tr("head i"),
        "head": tr("head"),
        "scale_by": tr("scale by"),
        "causal_mask": tr("causal mask"),
        "sentence": tr("sentence"),
        "or_example": tr("or an example"),
        "translate": tr("Translate"),
        "line_view": tr("line view"),
        "training_note": tr("The run's metrics.jsonl. The learning rate is drawn against eq. (3):"),
    }


def _script_text() -> dict[str, str]:
    return {
        "name_encoder": tr("encoder self-attention"),
        "name_decoder_self": tr("decoder self-attention (masked)"),
        "name_cross": tr("encoder-decoder attention"),
        "http_error": tr("the server answered HTTP {status}"),
        "no_server": tr("cannot reach the tmin explore server ({error}); fix: start it again (tmin explore)"),
        "static_sentences": tr("this static file holds precomputed data only; run tmin explore for other sentences "
                               "(here: {sentences})"),
        "static_layers": tr("this static file holds precomputed data only; run tmin explore for the model's layers "
                            "with other toggles or sentences (here: the first example, the model's own masks)"),
        "step_x": tr("X (token vectors)"),
        "step_pe": tr("PE (section 3.5)"),
        "step_x_layer": tr("X (the layer's input)"),
        "step_memory": tr("memory (encoder output)"),
        "step_unscaled": tr("not scaled (footnote 4)"),
        "step_mask": tr("mask (1 = may attend)"),
        "step_masked": tr("masked (-inf)"),
        "where_demo": tr("demo, seq_len {seq_len}"),
        "where_model": tr("{kind}, layer {layer}"),
        "summary": tr("{where}, h = {h}, d_k = {d_k}, head {head}: mean of each row's largest softmax weight = "
                      "{saturation}"),
        "summary_unscaled": tr("(unscaled: the softmax saturates, footnote 4)"),
        **_drawing_text(),
        **_model_text(),
    }


def _drawing_text() -> dict[str, str]:
    """heatmap.js: the shapes above the maps, the line view and the plots."""
    return {
        "range": tr("min {min}  max {max}"),
        "max": tr("max {max}"),
        "query": tr("queries"),
        "key": tr("keys"),
        "step_n": tr("step {step}"),
    }


def _model_text() -> dict[str, str]:
    """explore_model.js: page 2 (a sentence through the model) and page 3 (training)."""
    return {
        "tokens_source": tr("source:"),
        "tokens_output": tr("output ({how}):"),
        "click_alignment": tr("click: its source alignment"),
        "weight": tr("weight {weight}"),
        "layer_n": tr("layer {layer}"),
        "head_n": tr("head {head}"),
        "mean_heads": tr("mean of heads"),
        "mean": tr("mean"),
        "placeholder_ids": tr("space-separated token ids, e.g. 3 4 5 6 7"),
        "placeholder_text": tr("a source sentence"),
        "plot_loss": tr("loss (label-smoothed)"),
        "loss": tr("loss"),
        "learning_rate": tr("learning rate"),
        "logged_lr": tr("logged lr"),
        "eq3": tr("eq. (3)"),
        "eval_val_bleu": tr("val BLEU"),
        "eval_accuracy": tr("exact-match accuracy"),
        "eval_val_nll": tr("val NLL"),
        "tokens_per_s": tr("tokens / s"),
        "banner_random": tr("Random weights: no --checkpoint was given, so this model has learned nothing (the "
                            "[model] sizes of the config, the copy/reverse vocabulary of token ids)."),
    }
