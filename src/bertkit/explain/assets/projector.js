// The projector's scatter plot: one canvas, colours by label, hover for the text. No requests, no libraries.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const n = D.texts.length, labels = [...new Set(D.labels)].sort();
  const colour = (k) => `hsl(${Math.round((k * 360) / labels.length + 200) % 360}, 65%, 45%)`;
  const col = D.labels.map((l) => colour(labels.indexOf(l)));
  $("meta").textContent = `${D.model}: ${D.vectors} vectors of ${n} texts from ${D.source}.`;
  for (const name of Object.keys(D.layouts)) {
    const o = document.createElement("option");
    o.value = name; o.textContent = name;
    $("layout").appendChild(o);
  }
  labels.forEach((l, k) => {
    const s = document.createElement("span"), i = document.createElement("i");
    i.style.background = colour(k);
    s.appendChild(i); s.appendChild(document.createTextNode(`${l} (${D.labels.filter((x) => x === l).length})`));
    $("legend").appendChild(s);
  });
  const cv = $("plot"), W = 900, H = 640, PAD = 24, dpr = window.devicePixelRatio || 1;
  cv.width = W * dpr; cv.height = H * dpr; cv.style.width = W + "px"; cv.style.height = H + "px";
  let px = [];  // screen positions of the current layout
  function draw(hover) {
    const P = D.layouts[$("layout").value];
    const xs = P.map((p) => p[0]), ys = P.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const sx = (W - 2 * PAD) / (x1 - x0 || 1), sy = (H - 2 * PAD) / (y1 - y0 || 1);
    px = P.map((p) => [PAD + (p[0] - x0) * sx, H - PAD - (p[1] - y0) * sy]);
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fff"; g.fillRect(0, 0, W, H);
    for (let i = 0; i < n; i++) {
      g.fillStyle = col[i]; g.globalAlpha = hover === undefined || hover === i ? 0.8 : 0.35;
      g.beginPath(); g.arc(px[i][0], px[i][1], hover === i ? 6 : 3.5, 0, 2 * Math.PI); g.fill();
    }
    g.globalAlpha = 1;
    cv.dataset.layout = $("layout").value;
  }
  cv.addEventListener("mousemove", (ev) => {
    const r = cv.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    let best = -1, bd = 100;  // within 10 px
    for (let i = 0; i < n; i++) {
      const d = (px[i][0] - x) ** 2 + (px[i][1] - y) ** 2;
      if (d < bd) { bd = d; best = i; }
    }
    const tip = $("tip");
    if (best < 0) { tip.hidden = true; draw(); return; }
    tip.hidden = false;
    tip.textContent = `${D.labels[best]}: ${D.texts[best]}`;
    tip.dataset.index = String(best);
    tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
    draw(best);
  });
  cv.addEventListener("mouseleave", () => { $("tip").hidden = true; draw(); });
  $("layout").addEventListener("change", () => draw());
  draw();
  document.body.dataset.rendered = String(Math.round(performance.now()));
})();
