"use strict";
/* ---------------------------------------------------------------- page 2: a trained model */
function labelsOf(tr, kind) {
  const src = tr.source.labels, tin = tr.target.in_labels, tout = tr.target.out_labels;
  return kind === "encoder" ? [src, src] : kind === "decoder_self" ? [tin, tin] : [tout, src];
}

function renderTokens(tr) {
  const out = $("tr-output");
  out.innerHTML = '<div class="row"><span class="what-src"></span> <span class="src"></span></div>' +
                  '<div class="row"><span class="what-tgt"></span> <span class="tgt"></span></div>';
  out.querySelector(".what-src").textContent = T("tokens_source");
  out.querySelector(".what-tgt").textContent = T("tokens_output", { how: tr.decoded_by });
  tr.source.labels.forEach((s, j) => {
    const e = document.createElement("span"); e.className = "tok src-tok"; e.dataset.index = j; e.textContent = s;
    out.querySelector(".src").appendChild(e); });
  tr.target.out_labels.forEach((s, j) => {
    const e = document.createElement("span"); e.className = "tok tgt" + (STATE.focus === j ? " active" : "");
    e.dataset.index = j; e.textContent = s; e.title = T("click_alignment");
    e.addEventListener("click", () => focusTarget(STATE.focus === j ? null : j));
    out.querySelector(".tgt").appendChild(e); });
}

/* Highlight a target token's row in every cross-attention map and shade the source by its weight. */
function focusTarget(j) {
  STATE.focus = j;
  renderTranslation(STATE.translation);
  if (j === null) return;
  const tr = STATE.translation, last = tr.mean.cross.length - 1, m = TM.decode(tr.mean.cross[last]);
  document.querySelectorAll("#tr-output .src-tok").forEach((e, c) => {
    const w = m.data[j * m.cols + c];
    e.style.background = "rgba(31,95,168," + w.toFixed(3) + ")"; e.style.color = w > 0.5 ? "#fff" : "";
    e.title = T("weight", { weight: TM.fmt(w) });
  });
}

function renderGrids(tr) {
  const grids = $("tr-grids");
  grids.innerHTML = "";
  ["cross", "encoder", "decoder_self"].forEach(kind => {  /* the alignment first */
    const h2 = document.createElement("h2"); h2.textContent = KIND_NAMES[kind]; grids.appendChild(h2);
    const [rows, cols] = labelsOf(tr, kind);
    tr.attention[kind].forEach((heads, layer) => {
      const row = document.createElement("div"); row.className = "grid-row";
      row.innerHTML = '<div class="label"></div>';
      row.firstChild.textContent = T("layer_n", { layer: layer });
      const focus = kind === "cross" ? STATE.focus : null;
      heads.concat([tr.mean[kind][layer]]).forEach((m, head) => {
        const mean = head === heads.length;
        row.appendChild(TM.heatmap({ title: mean ? T("mean_heads") : T("head_n", { head: head }), mat: TM.decode(m), probs: true,
          rowLabels: rows, colLabels: cols, small: true, maxWidth: 260, cellMax: 18, highlightRow: focus,
          data: { kind: kind, layer: String(layer), head: mean ? "mean" : String(head) } }));
      });
      grids.appendChild(row);
    });
  });
}

function renderLines(tr) {
  const kind = $("lv-kind").value, layer = +$("lv-layer").value, head = $("lv-head").value;
  const [rows, cols] = labelsOf(tr, kind);
  const m = head === "mean" ? tr.mean[kind][layer] : tr.attention[kind][layer][+head];
  const box = $("tr-lines");
  box.innerHTML = "";
  box.appendChild(TM.lineView(TM.decode(m), rows, cols, kind === "cross" ? STATE.focus : null));
}

function renderTranslation(tr) {
  STATE.translation = tr;
  renderTokens(tr);
  renderGrids(tr);
  renderLines(tr);
}

async function translateSentence(sentence) {
  try {
    const tr = await api("translate", { sentence: sentence });
    showError("");
    STATE.focus = null;
    renderTranslation(tr);
    if ($("eq-source").value === "model") updateEquation();
  } catch (err) { showError(err.message); }
}

function setupModel() {
  const info = DATA.info;
  options($("tr-examples"), [""].concat(info.examples), "", v => v || "\u2014");
  options($("lv-layer"), [...Array(info.num_layers).keys()], info.num_layers - 1);
  options($("lv-head"), ["mean"].concat([...Array(info.num_heads).keys()]), "mean", v => (v === "mean" ? T("mean") : v));
  $("tr-input").placeholder = T(info.vocab === "ids" ? "placeholder_ids" : "placeholder_text");
  $("tr-form").addEventListener("submit", ev => { ev.preventDefault(); translateSentence($("tr-input").value); });
  $("tr-examples").addEventListener("change", () => {
    if ($("tr-examples").value) { $("tr-input").value = $("tr-examples").value; translateSentence($("tr-input").value); } });
  ["lv-kind", "lv-layer", "lv-head"].forEach(id => $(id).addEventListener("change", () => renderLines(STATE.translation)));
}

/* ---------------------------------------------------------------- page 3: training */
function renderCurves(cv) {
  const box = $("plots");
  box.innerHTML = "";
  if (!cv.available) { box.textContent = cv.note; return; }
  box.appendChild(TM.plot(T("plot_loss"), [{ name: T("loss"), points: cv.loss, color: "#1f5fa8" }], T("loss")));
  box.appendChild(TM.plot(T("learning_rate"), [{ name: T("logged_lr"), points: cv.lr, color: "#d9730d" },
    { name: T("eq3"), points: cv.lr_eq3, color: "#1b1f24", dash: "4 3" }], T("learning_rate")));
  Object.entries(cv.evals).forEach(([name, pts]) =>  /* eval_val_bleu, eval_accuracy, eval_val_nll */
    box.appendChild(TM.plot(T(name), [{ name: T(name), points: pts, color: "#2b8a3e" }], T(name))));
  box.appendChild(TM.plot(T("tokens_per_s"), [{ name: T("tokens_per_s"), points: cv.tokens_per_s, color: "#7048e8" }],
    T("tokens_per_s")));
}

function showPage(name) {
  document.querySelectorAll(".tab").forEach(t => t.classList.toggle("active", t.dataset.page === name));
  document.querySelectorAll(".page").forEach(p => { p.hidden = p.id !== "page-" + name; });
}

async function main() {
  const info = DATA.info;
  if (info.random) { $("banner").hidden = false; $("banner").textContent = T("banner_random"); }
  document.querySelectorAll(".tab").forEach(t => t.addEventListener("click", () => showPage(t.dataset.page)));
  setupEquation();
  setupModel();
  renderCurves(DATA.curves);
  const first = DATA.mode === "static" ? (DATA.translations[0] || {}).sentence : info.examples[0];
  if (first !== undefined) { $("tr-input").value = first; await translateSentence(first); }
  await updateEquation();
  document.body.dataset.ready = "1";
}
main();
