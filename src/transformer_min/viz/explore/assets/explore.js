"use strict";
/* tmin explore: the three pages. In the served page the toggles ask the server (/api/...); in the static
   file (tmin explore --static) they look up the data precomputed into it. */
const DATA = JSON.parse(document.getElementById("explore-data").textContent);
/* Every word the scripts show, in the page's language (viz/explore/text.py): T(name, {field: value}). */
function T(name, fields) {
  const text = (DATA.text || {})[name];
  if (text === undefined) throw new Error("tmin explore: no text " + name);
  return fields ? text.replace(/\{(\w+)\}/g, (m, k) => (k in fields ? String(fields[k]) : m)) : text;
}
const KIND_NAMES = { encoder: T("name_encoder"), decoder_self: T("name_decoder_self"), cross: T("name_cross") };
const STATE = { translation: null, focus: null };
const $ = id => document.getElementById(id);

function showError(message) { const e = $("error"); e.textContent = message || ""; e.hidden = !message; }

function options(select, values, selected, label) {
  select.innerHTML = "";
  values.forEach(v => { const o = document.createElement("option"); o.value = v; o.textContent = label ? label(v) : v;
                        if (String(v) === String(selected)) o.selected = true; select.appendChild(o); });
}

async function api(path, params) {
  if (DATA.mode === "static") return staticAnswer(path, params);
  let response, body = {};
  try { response = await fetch("/api/" + path + "?" + new URLSearchParams(params)); }
  catch (err) { throw new Error(T("no_server", { error: err.message })); }  /* the server was stopped */
  try { body = await response.json(); } catch (err) { body = {}; }
  if (!response.ok) throw new Error(body.error || T("http_error", { status: response.status }));
  return body;
}

function staticAnswer(path, p) {
  if (path === "translate") {
    const found = DATA.translations.find(t => t.sentence === p.sentence);
    if (!found) throw new Error(T("static_sentences", { sentences: DATA.translations.map(t => t.sentence).join(" | ") }));
    return found;
  }
  if (p.source === "demo") {
    const combo = DATA.demo.combos[[p.seq_len, p.heads, p.scale, p.causal].join("|")];
    return { source: "demo", seq_len: +p.seq_len, causal: p.causal === "1", shared: DATA.demo.shared[p.seq_len], combo: combo };
  }
  const natural = p.scale === "1" && p.causal === (p.kind === "decoder_self" ? "1" : "0");
  const found = DATA.model_equations[p.kind + "|" + p.layer];
  if (!found || !natural || found.sentence !== p.sentence)
    throw new Error(T("static_layers"));
  return found;
}

/* ---------------------------------------------------------------- page 1: eq. (1), step by step */
function equationParams() {
  const source = $("eq-source").value;
  const p = { source: source, scale: $("eq-scale").checked ? "1" : "0", causal: $("eq-causal").checked ? "1" : "0" };
  if (source === "demo") { p.heads = $("eq-heads").value; p.seq_len = $("eq-seqlen").value; }
  else { p.kind = $("eq-kind").value; p.layer = $("eq-layer").value; p.sentence = STATE.translation ? STATE.translation.sentence : ""; }
  return p;
}

async function updateEquation() {
  document.body.classList.toggle("eq-model", $("eq-source").value === "model");
  try {
    const r = await api("equation", equationParams());
    showError("");
    renderEquation(r);
  } catch (err) { showError(err.message); }
}

function equationSteps(r, i) {
  const c = r.combo, h = c.heads[i], sh = {};
  Object.entries(r.shared).forEach(([k, v]) => { sh[k] = TM.decode(v); });
  const slice = (m, d) => TM.columns(m, i * d, (i + 1) * d);
  const xIn = r.source === "demo" ? "(X+PE)" : "X";
  const steps = r.source === "demo"
    ? [[T("step_x"), sh.X], [T("step_pe"), sh.PE], ["X + PE", sh.XPE]]
    : [[T("step_x_layer"), sh.X]].concat(sh.X_kv ? [[T("step_memory"), sh.X_kv]] : []);
  return steps.concat([
    ["Q_" + i + " = " + xIn + " W^Q_" + i, slice(sh.Q, c.d_k)], ["K_" + i + " = " + xIn + " W^K_" + i, slice(sh.K, c.d_k)],
    ["V_" + i + " = " + xIn + " W^V_" + i, slice(sh.V, c.d_v)], ["Q K^T", TM.decode(h.scores)],
    [c.scale ? "/ sqrt(d_k = " + c.d_k + ")" : T("step_unscaled"), TM.decode(h.scaled)],
    [T("step_mask"), TM.decode(h.mask), true], [T("step_masked"), TM.decode(h.masked)],
    ["softmax", TM.decode(h.weights), true], ["head_" + i + " = softmax(...) V_" + i, TM.decode(h.out)],
    ["Concat(head_1..head_" + c.num_heads + ")", TM.decode(c.concat)], ["MultiHead = Concat W^O", TM.decode(c.output)]]);
}

function renderEquation(r) {
  const headSel = $("eq-head"), n = r.combo.num_heads;
  const current = Math.min(+headSel.value || 0, n - 1);
  options(headSel, [...Array(n).keys()], current);
  const steps = $("eq-steps");
  steps.innerHTML = "";
  const square = r.source === "demo" ? null : [r.q_labels, r.k_labels];
  equationSteps(r, current).forEach(([title, mat, probs], j) => {
    const attention = mat.rows && square && mat.cols === r.k_labels.length && j >= 3;
    steps.appendChild(TM.heatmap({ title: title, mat: mat, probs: !!probs, maxWidth: 540,
      rowLabels: square ? r.q_labels : null, colLabels: attention ? r.k_labels : null,
      data: { step: String(j), head: String(current) } }));
  });
  const where = r.source === "demo" ? T("where_demo", { seq_len: r.seq_len })
    : T("where_model", { kind: KIND_NAMES[r.kind], layer: r.layer });
  $("eq-summary").textContent = T("summary", { where: where, h: n, d_k: r.combo.d_k, head: current,
    saturation: r.combo.saturation.toFixed(4) }) + (r.combo.scale ? "" : "  " + T("summary_unscaled"));
}

function setupEquation() {
  const info = DATA.info, ch = DATA.choices;
  options($("eq-heads"), ch.heads, ch.heads.includes(info.demo.num_heads) ? info.demo.num_heads : ch.heads[ch.heads.length - 1]);
  options($("eq-seqlen"), ch.seq_len, info.demo.seq_len);
  options($("eq-layer"), [...Array(info.num_layers).keys()], 0);
  ["eq-heads", "eq-seqlen", "eq-layer", "eq-head", "eq-scale", "eq-causal"].forEach(id =>
    $(id).addEventListener("change", updateEquation));
  ["eq-source", "eq-kind"].forEach(id => $(id).addEventListener("change", () => {
    const model = $("eq-source").value === "model", kind = $("eq-kind").value;
    $("eq-causal").checked = model && kind === "decoder_self";  /* the model's own mask (section 3.2.3) */
    $("eq-causal").disabled = model && kind === "cross";  /* queries: target, keys: source */
    updateEquation();
  }));
}
