// Neuron view: for one layer and head, the selected token's query vector, every token's key vector,
// their elementwise product, the scaled dot product and the softmax row, recomputed here from the
// stored float32 queries and keys. Registered for report.js to run.
"use strict";
window.bertkitViews = (window.bertkitViews || []).concat([function neuronView(D, h) {
  const NV = D.neuron;
  const { $, el, N, T } = h;
  const tab = $("tab-neuron");
  if (!NV) { tab.hidden = true; return; }
  const d = NV.head_size, HEADS = D.heads;
  const decode = (b64) => {
    const s = atob(b64), a = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
    return new Float32Array(a.buffer);
  };
  const Q = NV.queries_f32.map(decode), K = NV.keys_f32.map(decode);
  // Options carry the layer number itself; the stored arrays are indexed by position in NV.layers.
  NV.layers.forEach((l) => $("neuron-layer").appendChild(el("option", { value: String(l) }, String(l))));
  const HID = D.head_ids || Array.from({ length: HEADS }, (_, k) => k);
  for (let k = 0; k < HEADS; k++) $("neuron-head").appendChild(el("option", { value: String(k) }, String(HID[k])));
  D.tokens.forEach((t, i) => $("neuron-token").appendChild(el("option", { value: String(i) }, `${i}: ${t}`)));

  const views = { head: $("headview"), model: $("modelview"), neuron: $("neuronview") };
  const show = (name) => {
    for (const k in views) views[k].hidden = k !== name;
    for (const k in views) $("tab-" + k).classList.toggle("active", k === name);
    if (name === "neuron") draw();
  };
  tab.addEventListener("click", () => show("neuron"));
  $("tab-head").addEventListener("click", () => show("head"));
  $("tab-model").addEventListener("click", () => show("model"));

  // One row per key token: label, k (d cells), q x k (d cells), q.k/sqrt(d), softmax bar.
  const cv = $("nv"), ROW = 16, TOP = 44, LEFTW = 120, CELL = Math.max(3, Math.min(8, Math.floor(256 / d)));
  const VW = d * CELL, GAP = 18, NUMW = 70, BARW = 130;
  const W = LEFTW + GAP + VW + GAP + VW + GAP + NUMW + BARW + 60, H = TOP + N * ROW + 10;
  const dpr = window.devicePixelRatio || 1;
  cv.width = W * dpr; cv.height = H * dpr; cv.style.width = W + "px"; cv.style.height = H + "px";
  const xK = LEFTW + GAP, xP = xK + VW + GAP, xS = xP + VW + GAP, xB = xS + NUMW;
  const colour = (v, max) => {
    const a = Math.min(1, Math.abs(v) / (max || 1));
    return v >= 0 ? `rgba(214, 39, 40, ${a})` : `rgba(31, 119, 180, ${a})`;
  };
  function row(li, hd, i, M) { return M[li].subarray((hd * N + i) * d, (hd * N + i + 1) * d); }

  function draw() {
    const li = NV.layers.indexOf(Number($("neuron-layer").value)), hd = Number($("neuron-head").value), qi = Number($("neuron-token").value);
    const q = row(li, hd, qi, Q);
    const keys = [], prods = [], scores = [];
    let kMax = 0, pMax = 0;
    for (let j = 0; j < N; j++) {
      const k = row(li, hd, j, K), p = new Float64Array(d);
      let s = 0;
      for (let c = 0; c < d; c++) { p[c] = q[c] * k[c]; s += p[c]; kMax = Math.max(kMax, Math.abs(k[c])); pMax = Math.max(pMax, Math.abs(p[c])); }
      keys.push(k); prods.push(p); scores.push(s / Math.sqrt(d));
    }
    const m = Math.max(...scores), e = scores.map((s) => Math.exp(s - m)), z = e.reduce((a, b) => a + b, 0);
    const probs = e.map((x) => x / z);
    cv.dataset.softmax = JSON.stringify(probs.map((x) => Number(x.toFixed(7))));
    cv.dataset.scores = JSON.stringify(scores.map((x) => Number(x.toFixed(6))));
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fff"; g.fillRect(0, 0, W, H);
    g.font = "11px ui-monospace, Menlo, Consolas, monospace"; g.textBaseline = "middle"; g.fillStyle = "#4a5562";
    g.textAlign = "left";
    g.fillText(T("nv.q", { t: D.tokens[qi] }), xK - GAP + 2, 10);
    let qMax = 0;
    for (let c = 0; c < d; c++) qMax = Math.max(qMax, Math.abs(q[c]));
    for (let c = 0; c < d; c++) { g.fillStyle = colour(q[c], qMax); g.fillRect(xP + c * CELL, 4, CELL - 0.5, 12); }
    g.fillStyle = "#4a5562";
    g.fillText(T("nv.k"), xK, TOP - 10);
    g.fillText(T("nv.qk"), xP, TOP - 10);
    g.fillText("q\u00b7k/\u221ad", xS, TOP - 10);
    g.fillText("softmax", xB, TOP - 10);
    for (let j = 0; j < N; j++) {
      const y = TOP + j * ROW;
      g.fillStyle = j === qi ? "#c06000" : "#1d232b"; g.textAlign = "right";
      g.fillText(D.tokens[j], LEFTW, y + ROW / 2);
      for (let c = 0; c < d; c++) {
        g.fillStyle = colour(keys[j][c], kMax); g.fillRect(xK + c * CELL, y + 1, CELL - 0.5, ROW - 2);
        g.fillStyle = colour(prods[j][c], pMax); g.fillRect(xP + c * CELL, y + 1, CELL - 0.5, ROW - 2);
      }
      g.fillStyle = "#1d232b"; g.textAlign = "right";
      g.fillText(scores[j].toFixed(2), xS + NUMW - 10, y + ROW / 2);
      g.fillStyle = "#24508f"; g.fillRect(xB, y + 3, BARW * probs[j], ROW - 6);
      g.fillStyle = "#1d232b"; g.textAlign = "left";
      g.fillText(probs[j].toFixed(3), xB + BARW + 4, y + ROW / 2);
    }
  }
  for (const id of ["neuron-layer", "neuron-head", "neuron-token"]) $(id).addEventListener("change", draw);
  cv.addEventListener("mousemove", (ev) => {
    const r = cv.getBoundingClientRect(), x = ev.clientX - r.left, i = Math.floor((ev.clientY - r.top - TOP) / ROW);
    if (x < LEFTW + 4 && i >= 0 && i < N && String(i) !== $("neuron-token").value) {
      $("neuron-token").value = String(i);
      draw();
    }
  });
  cv.addEventListener("click", (ev) => cv.dispatchEvent(new MouseEvent("mousemove", ev)));
}]);
