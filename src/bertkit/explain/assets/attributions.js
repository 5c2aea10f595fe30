// Attributions view: each method's per-token scores for one target, side by side, tokens coloured
// red (raises the target's logit) or blue (lowers it). Registered for report.js to run.
"use strict";
window.bertkitViews = (window.bertkitViews || []).concat([function attributionsView(D, h) {
  const A = D.attributions;
  if (!A) return;
  const { $, el, fmt, T } = h;
  $("attributions").hidden = false;
  $("nav-attributions").hidden = false;
  const names = { "integrated-gradients": T("attr.ig"), "gradient-x-input": T("attr.gxi"),
    "attention-rollout": T("attr.rollout") };
  const targets = [];
  for (const r of A.results) if (!targets.includes(r.target.name)) targets.push(r.target.name);
  targets.forEach((t, i) => $("attr-target").appendChild(el("option", { value: String(i) }, t)));
  const texts = [D.text].concat(D.pair === null ? [] : [D.pair]);

  // Groups of positions shown as one unit: every token alone, or the pieces of each word together.
  function units(words) {
    const out = [];
    D.tokens.forEach((tok, i) => {
      const s = D.sequence_ids[i], w = D.word_ids[i], last = out[out.length - 1];
      if (words && s !== null && last && last.s === s && last.w === w) last.idx.push(i);
      else out.push({ s, w, idx: [i] });
    });
    for (const u of out) {
      const a = u.idx[0], b = u.idx[u.idx.length - 1];
      u.label = !words || u.s === null ? u.idx.map((i) => D.tokens[i]).join(" ")
        : texts[u.s].slice(D.offsets[a][0], D.offsets[b][1]);
    }
    return out;
  }
  const colour = (v, max) => {
    const a = max > 0 ? Math.min(1, Math.abs(v) / max) : 0;
    return v >= 0 ? `rgba(214, 39, 40, ${a.toFixed(3)})` : `rgba(31, 119, 180, ${a.toFixed(3)})`;
  };
  function legend(max) {
    const box = el("div", { class: "attr-legend" });
    box.appendChild(el("span", null, fmt(-max, 4)));
    const bar = el("span", { class: "attr-scale" });
    bar.style.background = "linear-gradient(to right, rgba(31,119,180,1), rgba(255,255,255,1), rgba(214,39,40,1))";
    box.appendChild(bar);
    box.appendChild(el("span", null, "+" + fmt(max, 4)));
    return box;
  }
  function draw() {
    const ti = Number($("attr-target").value), words = $("attr-words").checked;
    const us = units(words), box = $("attr-methods");
    box.textContent = "";
    for (const r of A.results) {
      if (r.target.name !== targets[ti]) continue;
      const col = el("div", { class: "attr-method", "data-method": r.method });
      col.appendChild(el("h3", null, names[r.method] || r.method));
      const vals = us.map((u) => u.idx.reduce((s, i) => s + r.scores[i], 0));
      const max = Math.max(1e-12, ...vals.map(Math.abs));
      col.appendChild(legend(max));
      const conv = A.conventions[r.method];
      const lines = Object.keys(conv).map((k) => `${k}: ${conv[k]}`);
      if (r.residual !== null && r.residual !== undefined) {
        lines.push(T("attr.complete", { fx: fmt(r.f_x, 4), fb: fmt(r.f_baseline, 4),
          sum: fmt(r.residual + r.f_x - r.f_baseline, 4), res: r.residual.toExponential(2) }));
      }
      const p = el("p", { class: "hint attr-convention" });
      p.textContent = lines.join("; ");
      col.appendChild(p);
      const toks = el("div", { class: "attr-tokens" });
      us.forEach((u, k) => {
        const span = el("span", { class: "attr-tok" + (u.idx.includes(r.target.position) ? " attr-target" : ""),
          title: `${u.label}: ${vals[k].toExponential(3)}` }, u.label);
        span.style.background = colour(vals[k], max);
        span.dataset.score = String(vals[k]);
        toks.appendChild(span);
      });
      col.appendChild(toks);
      box.appendChild(col);
    }
  }
  $("attr-target").addEventListener("change", draw);
  $("attr-words").addEventListener("change", draw);
  draw();
}]);
