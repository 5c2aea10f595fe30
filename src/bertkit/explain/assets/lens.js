// Logit lens view: at each [MASK], every layer's vector read through the masked-LM head, top tokens
// across, layers down; the final answer is marked in every row and the layer where it first stays on top.
"use strict";
window.bertkitViews = (window.bertkitViews || []).concat([function lensView(D, h) {
  const L = D.lens;
  if (!L) return;
  const { $, el, fmt, T } = h;
  $("lens").hidden = false;
  $("nav-lens").hidden = false;
  $("lens-assumption").textContent = T("lens.assumption");
  const box = $("lens-positions");
  for (const p of L.positions) {
    const first = p.first_layer === null ? T("lens.never")
      : p.first_layer === 0 ? T("lens.emb") : T("lens.first", { l: p.first_layer });
    box.appendChild(el("h3", null, T("lens.position", { p: p.position, t: p.token, a: p.answer.token, first })));
    const t = el("table", { class: "data lens" });
    const hr = el("tr");
    hr.appendChild(el("th", null, T("lens.layer")));
    for (let k = 0; k < L.top_k; k++) hr.appendChild(el("th", { class: "tok" }, `#${k + 1}`));
    hr.appendChild(el("th", null, `p(${p.answer.token})`));
    hr.appendChild(el("th", null, T("lens.rank")));
    t.appendChild(hr);
    for (const row of p.layers) {
      const tr = el("tr", row.layer === p.first_layer ? { class: "lens-first" } : null);
      tr.appendChild(el("td", null, row.layer === 0 ? T("lens.layer0") : String(row.layer)));
      for (const x of row.top) {
        const td = el("td", { class: "tok" + (x.id === p.answer.id ? " lens-answer" : ""), title: T("lens.id", { id: x.id }) });
        td.appendChild(el("span", { class: "scorebar", style: `width:${Math.round(60 * x.score)}px` }));
        td.appendChild(document.createTextNode(`${x.token} ${fmt(x.score, 3)}`));
        tr.appendChild(td);
      }
      tr.appendChild(el("td", null, fmt(row.answer_score, 4)));
      tr.appendChild(el("td", null, String(row.answer_rank)));
      t.appendChild(tr);
    }
    box.appendChild(t);
  }
}]);
