// The report's script: reads the inline JSON data block and draws every section. No requests, no libraries.
"use strict";
(function () {
  const t0 = performance.now();
  const D = JSON.parse(document.getElementById("data").textContent);
  const N = D.tokens.length, HEADS = D.heads, LAYERS = D.layers;
  // The model's numbers of the kept heads (--heads); every head when the data does not say.
  const HID = D.head_ids || Array.from({ length: HEADS }, (_, h) => h);
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  // Every word the page shows comes from the language's catalogue (strings.<lang>.json), with {name} slots.
  const T = (key, vars) => {
    let s = (D.strings && D.strings[key]) || key;
    for (const n in vars || {}) s = s.split("{" + n + "}").join(String(vars[n]));
    return s;
  };
  const fmt = (x, d) => (x === null || x === undefined ? "" : Number(x).toFixed(d === undefined ? 3 : d));

  // Attention arrives as one base64 string of uint8 (weight x 255) per kept layer: [head][query][key].
  const ATT = D.attention_u8.map((b64) => {
    const s = atob(b64), a = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
    return a;
  });
  const att = (li, h, i, j) => ATT[li][(h * N + i) * N + j];  // 0..255
  const headColor = (h, alpha) => `hsla(${Math.round((h * 360) / HEADS + 10) % 360}, 70%, 45%, ${alpha === undefined ? 1 : alpha})`;

  // ------------------------------------------------------------------ header
  const c = D.config;
  $("meta").textContent = T("meta", { model: D.model, cls: D.model_class, layers: c.num_hidden_layers,
    heads: c.num_attention_heads, hidden: c.hidden_size, vocab: c.vocab_size, n: N });
  for (const n of D.notes) $("notes").appendChild(el("div", { class: "note" }, n));
  $("quantnote").textContent = T("quantnote");

  // ------------------------------------------------------------------ 1. tokenization
  const texts = [D.text].concat(D.pair === null ? [] : [D.pair]);
  const textDivs = texts.map((t, s) => {
    const d = el("div", { class: "text", id: `text${s}` });
    d.textContent = t;
    $("texts").appendChild(el("div", { class: "hint" }, s === 0 ? (texts.length > 1 ? T("text.a") : T("text")) : T("text.b")));
    $("texts").appendChild(d);
    return d;
  });
  function highlight(i) {
    textDivs.forEach((d, s) => { d.textContent = texts[s]; });
    if (i === null) return;
    const s = D.sequence_ids[i], o = D.offsets[i];
    if (s === null || o[1] <= o[0]) return;
    const d = textDivs[s], t = texts[s];
    d.textContent = "";
    d.appendChild(document.createTextNode(t.slice(0, o[0])));
    d.appendChild(el("mark", null, t.slice(o[0], o[1])));
    d.appendChild(document.createTextNode(t.slice(o[1])));
  }
  D.tokens.forEach((tok, i) => {
    const special = D.sequence_ids[i] === null;
    const cls = "chip" + (special ? " special" : "") + (tok.startsWith("##") ? " cont" : "") + (D.token_type_ids[i] ? " type1" : "");
    const chip = el("span", { class: cls, title: T("chip.title", { i, id: D.input_ids[i],
      type: D.token_type_ids[i], from: D.offsets[i][0], to: D.offsets[i][1] }) });
    chip.appendChild(document.createTextNode(tok));
    chip.appendChild(el("span", { class: "id" }, String(D.input_ids[i])));
    chip.addEventListener("mouseenter", () => highlight(i));
    chip.addEventListener("mouseleave", () => highlight(null));
    $("chips").appendChild(chip);
  });
  {
    const tb = $("words");
    const hr = el("tr");
    ["text", "word", "pieces", "ids", "characters"].forEach((h) => hr.appendChild(el("th", { class: "tok" }, T("words." + h))));
    tb.appendChild(hr);
    const groups = [];
    D.tokens.forEach((tok, i) => {
      const s = D.sequence_ids[i], w = D.word_ids[i];
      if (s === null) { groups.push({ s: null, idx: [i] }); return; }
      const last = groups[groups.length - 1];
      if (last && last.s === s && last.w === w) last.idx.push(i); else groups.push({ s, w, idx: [i] });
    });
    for (const g of groups) {
      const tr = el("tr");
      const first = g.idx[0], lastI = g.idx[g.idx.length - 1];
      const word = g.s === null ? T("special") : texts[g.s].slice(D.offsets[first][0], D.offsets[lastI][1]);
      tr.appendChild(el("td", { class: "tok" }, g.s === null ? "" : g.s === 0 ? "A" : "B"));
      tr.appendChild(el("td", { class: "tok" }, word));
      tr.appendChild(el("td", { class: "tok" }, g.idx.map((i) => D.tokens[i]).join(" ")));
      tr.appendChild(el("td", { class: "tok" }, g.idx.map((i) => D.input_ids[i]).join(" ")));
      tr.appendChild(el("td", { class: "tok" }, g.s === null ? "" : `${D.offsets[first][0]}-${D.offsets[lastI][1]}`));
      tr.addEventListener("mouseenter", () => highlight(first));
      tr.addEventListener("mouseleave", () => highlight(null));
      tb.appendChild(tr);
    }
  }

  // ------------------------------------------------------------------ 2. embeddings
  {
    const P = D.embedding_parts, tb = $("embtable");
    const cols = [["word", T("emb.word"), ""], ["position", T("emb.position"), "p"], ["token_type", T("emb.token_type"), "t"],
      ["sum", T("emb.sum"), "s"], ["layernorm", T("emb.layernorm"), "l"]];
    const hr = el("tr");
    hr.appendChild(el("th", { class: "tok" }, "#"));
    hr.appendChild(el("th", { class: "tok" }, T("token")));
    cols.forEach((cc) => hr.appendChild(el("th", null, "|" + cc[1] + "|")));
    tb.appendChild(hr);
    const maxOf = {};
    cols.forEach((cc) => { maxOf[cc[0]] = Math.max(1e-9, ...P[cc[0]]); });
    for (let i = 0; i < N; i++) {
      const tr = el("tr");
      tr.appendChild(el("td", { class: "tok" }, String(i)));
      tr.appendChild(el("td", { class: "tok" }, D.tokens[i]));
      cols.forEach((cc) => {
        const td = el("td");
        const bar = el("span", { class: "bar " + cc[2] });
        bar.style.width = Math.round((60 * P[cc[0]][i]) / maxOf[cc[0]]) + "px";
        td.appendChild(bar);
        td.appendChild(document.createTextNode(fmt(P[cc[0]][i], 3)));
        tr.appendChild(td);
      });
      tb.appendChild(tr);
    }
  }

  // ------------------------------------------------------------------ 3a. head view
  const layerSel = $("layer");
  LAYERS.forEach((l, li) => layerSel.appendChild(el("option", { value: String(li) }, String(l))));
  const headOn = new Array(HEADS).fill(true);
  for (let h = 0; h < HEADS; h++) {
    const lab = el("label", { class: "headtoggle" });
    lab.style.background = headColor(h);
    const cb = el("input", { type: "checkbox", "data-head": String(HID[h]) });
    cb.checked = true;
    cb.addEventListener("change", () => { headOn[h] = cb.checked; drawHeadView(); });
    lab.appendChild(cb);
    lab.appendChild(document.createTextNode(String(HID[h])));
    $("headtoggles").appendChild(lab);
  }
  const setAll = (v) => {
    document.querySelectorAll("#headtoggles input").forEach((cb) => { cb.checked = v; });
    headOn.fill(v);
    drawHeadView();
  };
  $("allheads").addEventListener("click", () => setAll(true));
  $("noheads").addEventListener("click", () => setAll(false));
  layerSel.addEventListener("change", () => drawHeadView());

  const hv = $("hv"), ROW = 18, TOP = 24, LEFTW = 150, GAP = 260, LINE_BUDGET = 6000;
  const dpr = window.devicePixelRatio || 1;
  hv.width = (LEFTW * 2 + GAP) * dpr;
  hv.height = (TOP + N * ROW + 10) * dpr;
  hv.style.width = LEFTW * 2 + GAP + "px";
  hv.style.height = TOP + N * ROW + 10 + "px";
  let focus = null;  // the hovered query token, or null for all
  function drawHeadView() {
    const g = hv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, LEFTW * 2 + GAP, TOP + N * ROW + 10);
    const li = Number(layerSel.value);
    g.font = "12px ui-monospace, Menlo, Consolas, monospace";
    g.fillStyle = "#4a5562";
    g.textAlign = "center";
    g.fillText(T("hv.title", { layer: LAYERS[li] }), LEFTW + GAP / 2, 14);
    const x0 = LEFTW + 4, x1 = LEFTW + GAP - 4;
    // Lines are grouped by head and by 16 opacity levels: a few hundred strokes instead of one per line.
    // A software-rasterised canvas slows down past some 10^5 segments, so a long input draws each token's
    // `perRow` strongest lines per head (all of them for the hovered token).
    const active = Math.max(1, headOn.filter(Boolean).length);
    const perRow = focus !== null ? N : Math.max(1, Math.floor(LINE_BUDGET / (N * active)));
    $("hvlimit").textContent = perRow < N ? T("hv.limit", { n: perRow }) : "";
    for (let h = 0; h < HEADS; h++) {
      if (!headOn[h]) continue;
      const buckets = Array.from({ length: 16 }, () => []);
      const push = (i, j, w) => { if (w >= 3) buckets[w >> 4].push(i, j); };  // below 0.012: invisible anyway
      for (let i = 0; i < N; i++) {
        if (focus !== null && i !== focus) continue;
        if (perRow >= N) {
          for (let j = 0; j < N; j++) push(i, j, att(li, h, i, j));
          continue;
        }
        const top = [];  // (weight, j) of the row's strongest keys, weakest first
        for (let j = 0; j < N; j++) {
          const w = att(li, h, i, j);
          if (top.length < perRow || w > top[0][0]) {
            if (top.length === perRow) top.shift();
            let k = 0;
            while (k < top.length && top[k][0] < w) k++;
            top.splice(k, 0, [w, j]);
          }
        }
        for (const [w, j] of top) push(i, j, w);
      }
      g.lineWidth = 2;
      buckets.forEach((b, k) => {
        if (!b.length) return;
        g.strokeStyle = headColor(h, Math.min(1, ((k + 1) / 16) * (focus === null ? 0.9 : 1)));
        g.beginPath();
        for (let m = 0; m < b.length; m += 2) {
          g.moveTo(x0, TOP + b[m] * ROW + ROW / 2);
          g.lineTo(x1, TOP + b[m + 1] * ROW + ROW / 2);
        }
        g.stroke();
      });
    }
    g.textBaseline = "middle";
    for (let i = 0; i < N; i++) {
      const y = TOP + i * ROW + ROW / 2;
      g.fillStyle = focus === i ? "#c06000" : "#1d232b";
      g.textAlign = "right";
      g.fillText(D.tokens[i], LEFTW, y);
      g.fillStyle = "#1d232b";
      g.textAlign = "left";
      g.fillText(D.tokens[i], LEFTW + GAP, y);
    }
  }
  hv.addEventListener("mousemove", (ev) => {
    const r = hv.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    const i = Math.floor((y - TOP) / ROW);
    const f = x < LEFTW + 4 && i >= 0 && i < N ? i : null;
    if (f !== focus) { focus = f; drawHeadView(); }
  });
  hv.addEventListener("mouseleave", () => { if (focus !== null) { focus = null; drawHeadView(); } });

  // ------------------------------------------------------------------ 3b. model view
  // Heat colours: a 256-entry table from dark blue through teal to yellow (like viridis).
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const LUT = new Uint8ClampedArray(256 * 3);
  for (let v = 0; v < 256; v++) {
    const t = Math.sqrt(v / 255) * (STOPS.length - 1);  // sqrt: small weights stay visible
    const k = Math.min(STOPS.length - 2, Math.floor(t)), f = t - k;
    for (let ch = 0; ch < 3; ch++) LUT[v * 3 + ch] = STOPS[k][ch] + f * (STOPS[k + 1][ch] - STOPS[k][ch]);
  }
  // Thumbnails of long inputs are decimated to at most THUMB pixels a side, each pixel the largest weight
  // of its block (so a strong single weight stays visible); a click still opens the full matrix.
  const THUMB = 128, S = Math.min(N, THUMB);
  function paintMatrix(canvas, li, h) {
    canvas.width = S;
    canvas.height = S;
    const g = canvas.getContext("2d");
    const img = g.createImageData(S, S);
    const base = h * N * N, src = ATT[li];
    for (let a = 0; a < S; a++) {
      const i0 = Math.floor((a * N) / S), i1 = Math.floor(((a + 1) * N) / S);
      for (let b = 0; b < S; b++) {
        const j0 = Math.floor((b * N) / S), j1 = Math.floor(((b + 1) * N) / S);
        let v = 0;
        for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) v = Math.max(v, src[base + i * N + j]);
        const p = a * S + b;
        img.data[p * 4] = LUT[v * 3];
        img.data[p * 4 + 1] = LUT[v * 3 + 1];
        img.data[p * 4 + 2] = LUT[v * 3 + 2];
        img.data[p * 4 + 3] = 255;
      }
    }
    g.putImageData(img, 0, 0);
  }
  {
    const grid = $("grid");
    grid.style.gridTemplateColumns = `40px repeat(${HEADS}, 66px)`;
    grid.appendChild(el("div", { class: "lab" }, ""));
    for (let h = 0; h < HEADS; h++) grid.appendChild(el("div", { class: "lab" }, T("grid.head", { h: HID[h] })));
    LAYERS.forEach((l, li) => {
      grid.appendChild(el("div", { class: "lab" }, T("grid.layer", { l })));
      for (let h = 0; h < HEADS; h++) {
        const cv = el("canvas", { "data-layer": String(l), "data-head": String(HID[h]), title: T("grid.title", { l, h: HID[h] }) });
        paintMatrix(cv, li, h);
        cv.addEventListener("click", () => openBig(li, h));
        grid.appendChild(cv);
      }
    });
  }
  function openBig(li, h) {
    const cell = Math.max(6, Math.min(22, Math.floor(760 / N)));
    const lab = 120, big = $("big");
    const w = lab + N * cell + 10, hgt = lab + N * cell + 10;
    big.width = w * dpr;
    big.height = hgt * dpr;
    big.style.width = w + "px";
    big.style.height = hgt + "px";
    const g = big.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fff";
    g.fillRect(0, 0, w, hgt);
    for (let i = 0; i < N; i++) {
      for (let j = 0; j < N; j++) {
        const v = att(li, h, i, j);
        g.fillStyle = `rgb(${LUT[v * 3]},${LUT[v * 3 + 1]},${LUT[v * 3 + 2]})`;
        g.fillRect(lab + j * cell, lab + i * cell, cell, cell);
      }
    }
    g.fillStyle = "#1d232b";
    g.font = `${Math.min(12, cell)}px ui-monospace, Menlo, Consolas, monospace`;
    g.textBaseline = "middle";
    g.textAlign = "right";
    for (let i = 0; i < N; i++) g.fillText(D.tokens[i], lab - 4, lab + i * cell + cell / 2);
    for (let j = 0; j < N; j++) {
      g.save();
      g.translate(lab + j * cell + cell / 2, lab - 4);
      g.rotate(-Math.PI / 2);
      g.textAlign = "left";
      g.fillText(D.tokens[j], 0, 0);
      g.restore();
    }
    $("overlaytitle").textContent = T("big.title", { l: LAYERS[li], h: HID[h] });
    $("overlay").hidden = false;
  }
  $("overlayclose").addEventListener("click", () => { $("overlay").hidden = true; });
  $("overlay").addEventListener("click", (ev) => { if (ev.target === $("overlay")) $("overlay").hidden = true; });
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") $("overlay").hidden = true; });

  const showView = (model) => {
    $("headview").hidden = model;
    $("modelview").hidden = !model;
    $("tab-head").classList.toggle("active", !model);
    $("tab-model").classList.toggle("active", model);
  };
  $("tab-head").addEventListener("click", () => showView(false));
  $("tab-model").addEventListener("click", () => showView(true));

  // ------------------------------------------------------------------ 3c. per-head summaries
  const heatBg = (t) => `hsl(${210 - 170 * t}, 70%, ${92 - 40 * t}%)`;
  function drawSummary() {
    const m = $("metric").value, S = D.head_summaries[m], tb = $("summary");
    tb.textContent = "";
    const hr = el("tr");
    hr.appendChild(el("th", null, T("layer.head")));
    for (let h = 0; h < HEADS; h++) hr.appendChild(el("th", null, String(HID[h])));
    tb.appendChild(hr);
    const scale = m === "entropy" ? Math.log2(Math.max(2, N)) : 1;
    LAYERS.forEach((l, li) => {
      const tr = el("tr");
      tr.appendChild(el("th", null, String(l)));
      for (let h = 0; h < HEADS; h++) {
        const v = S[li][h], td = el("td", null, fmt(v, 2));
        td.style.background = heatBg(Math.max(0, Math.min(1, v / scale)));
        tr.appendChild(td);
      }
      tb.appendChild(tr);
    });
  }
  $("metric").addEventListener("change", drawSummary);
  drawSummary();

  // ------------------------------------------------------------------ 4. hidden states
  {
    const tb = $("hiddentable"), S = D.similarity_to_embedding, L = S.length;
    const hr = el("tr");
    hr.appendChild(el("th", { class: "tok" }, T("token.layer")));
    for (let l = 0; l < L; l++) hr.appendChild(el("th", null, l === 0 ? T("layer0") : String(l)));
    tb.appendChild(hr);
    for (let i = 0; i < N; i++) {
      const tr = el("tr");
      tr.appendChild(el("td", { class: "tok" }, D.tokens[i]));
      for (let l = 0; l < L; l++) {
        const v = S[l][i], td = el("td", { title: `|h| = ${fmt(D.hidden_state_norms[l][i], 2)}` }, fmt(v, 2));
        td.style.background = heatBg(Math.max(0, Math.min(1, v)));
        tr.appendChild(td);
      }
      tb.appendChild(tr);
    }
    const tr = el("tr");
    tr.appendChild(el("th", { class: "tok" }, T("cls.vs.mean")));
    for (let l = 0; l < L; l++) tr.appendChild(el("td", null, fmt(D.cls_vs_mean[l], 2)));
    tb.appendChild(tr);
  }

  // ------------------------------------------------------------------ 5. sentence vectors
  {
    const V = D.sentence_vectors, box = $("sentvec");
    const names = { cls: T("vec.cls"), pooler: T("vec.pooler"), mean: T("vec.mean") };
    const t = el("table", { class: "data" });
    const hr = el("tr");
    ["vector", "norm", "first8"].forEach((h) => hr.appendChild(el("th", { class: "tok" }, T("vec.col." + h))));
    t.appendChild(hr);
    for (const k of Object.keys(V)) {
      const tr = el("tr");
      tr.appendChild(el("td", { class: "tok" }, names[k] || k));
      tr.appendChild(el("td", null, fmt(V[k].norm, 3)));
      tr.appendChild(el("td", { class: "tok" }, V[k].first.map((x) => fmt(x, 3)).join("  ")));
      t.appendChild(tr);
    }
    box.appendChild(t);
    const ct = el("table", { class: "data" });
    const h2 = el("tr");
    ["pair", "cosine"].forEach((h) => h2.appendChild(el("th", { class: "tok" }, T("vec.col." + h))));
    ct.appendChild(h2);
    for (const k of Object.keys(D.sentence_cosines)) {
      const tr = el("tr");
      tr.appendChild(el("td", { class: "tok" }, k.split("|").join(T("vs"))));
      tr.appendChild(el("td", null, fmt(D.sentence_cosines[k], 3)));
      ct.appendChild(tr);
    }
    box.appendChild(ct);
    if (!V.pooler) box.appendChild(el("p", { class: "hint" }, T("no.pooler")));
  }

  // ------------------------------------------------------------------ 6. head predictions
  {
    const P = D.predictions, box = $("preds");
    const scoreRow = (t, label, score, extra) => {
      const tr = el("tr");
      tr.appendChild(el("td", { class: "tok" }, label));
      const td = el("td", { class: "tok" });
      const bar = el("span", { class: "scorebar" });
      bar.style.width = Math.round(120 * Math.max(0, Math.min(1, score))) + "px";
      td.appendChild(bar);
      td.appendChild(document.createTextNode(fmt(score, 4) + (extra || "")));
      tr.appendChild(td);
      t.appendChild(tr);
    };
    if (!P) {
      box.appendChild(el("p", null, D.model_class === "BertModel"
        ? T("pred.encoder.only") : T("pred.not.shown", { cls: D.model_class })));
    } else if (P.kind === "masked-lm") {
      box.appendChild(el("p", { class: "explain" }, T(P.all_positions ? "pred.mlm.all" : "pred.mlm")));
      if (!P.positions.length) box.appendChild(el("p", { class: "hint" }, T("pred.no.mask")));
      for (const r of P.positions) {
        const t = el("table", { class: "data preds" });
        const hr = el("tr");
        hr.appendChild(el("th", { class: "tok", colspan: "2" }, T("pred.position", { p: r.position, t: r.token })));
        t.appendChild(hr);
        r.top.forEach((x) => scoreRow(t, x.token, x.score));
        box.appendChild(t);
      }
    }
    if (P && P.next_sentence) {
      box.appendChild(el("h3", null, T("nsp")));
      const t = el("table", { class: "data preds" });
      scoreRow(t, T("nsp.is.next"), P.next_sentence.is_next);
      scoreRow(t, T("nsp.random"), P.next_sentence.is_random);
      box.appendChild(t);
    }
    if (P && P.kind === "sequence-classification") {
      box.appendChild(el("p", { class: "explain" }, T("pred.seq", { problem: P.problem, head: P.head || T("pred.seq.head") })));
      const t = el("table", { class: "data preds" });
      P.labels.forEach((x) => scoreRow(t, x.label, x.score, T("logit", { v: fmt(x.logit, 3) })));
      box.appendChild(t);
    }
    if (P && P.kind === "replaced-token") {
      box.appendChild(el("p", { class: "explain" }, T("pred.replaced")));
      const t = el("table", { class: "data preds" });
      P.tokens.forEach((x) => scoreRow(t, `${x.position} ${x.token}`, x.replaced));
      box.appendChild(t);
    }
    if (P && P.kind === "next-token") {
      box.appendChild(el("p", { class: "explain" }, T("pred.next", { after: P.after, p: P.position })));
      const t = el("table", { class: "data preds" });
      P.top.forEach((x) => scoreRow(t, x.token, x.score, T("logit", { v: fmt(x.logit, 3) })));
      box.appendChild(t);
    }
    if (P && P.kind === "question-answering") {
      const S = P.span;
      box.appendChild(el("p", { class: "explain" }, T(P.context === "pair" ? "pred.qa.pair" : "pred.qa", { n: P.max_answer_tokens })));
      if (!S) box.appendChild(el("p", { class: "hint" }, T("pred.qa.none")));
      else {
        const t = el("table", { class: "data preds" });
        const hr = el("tr");
        hr.appendChild(el("th", { class: "tok", colspan: "2" }, T("pred.qa.answer", { a: S.answer, s: S.start_token, e: S.end_token })));
        t.appendChild(hr);
        scoreRow(t, T("pred.qa.start", { t: D.tokens[S.start_token] }), S.start_score, T("logit", { v: fmt(S.start_logit, 3) }));
        scoreRow(t, T("pred.qa.end", { t: D.tokens[S.end_token] }), S.end_score, T("logit", { v: fmt(S.end_logit, 3) }));
        box.appendChild(t);
      }
    }
    if (P && P.kind === "token-classification") {
      box.appendChild(el("p", { class: "explain" }, T("pred.token")));
      const t = el("table", { class: "data preds" });
      const hr = el("tr");
      ["word", "tag", "score"].forEach((h) => hr.appendChild(el("th", { class: "tok" }, T("pred.col." + h))));
      t.appendChild(hr);
      P.words.forEach((x) => {
        const tr = el("tr");
        tr.appendChild(el("td", { class: "tok" }, x.word));
        tr.appendChild(el("td", { class: "tok" }, x.tag));
        tr.appendChild(el("td", null, fmt(x.score, 3)));
        t.appendChild(tr);
      });
      box.appendChild(t);
    }
  }

  drawHeadView();
  // Views kept in their own files (attributions.js, ...) registered themselves in window.bertkitViews.
  for (const view of window.bertkitViews || []) view(D, { $, el, fmt, T, ATT, att, headColor, N, HEADS, LAYERS });
  // For tests and benchmarks: script time, and time since navigation start (parsing included).
  document.body.dataset.scriptMs = String(Math.round(performance.now() - t0));
  document.body.dataset.rendered = String(Math.round(performance.now()));
  // ... and once the browser has laid out and painted the drawn page (what a reader waits for).
  requestAnimationFrame(() => setTimeout(() => { document.body.dataset.painted = String(Math.round(performance.now())); }, 0));
})();
