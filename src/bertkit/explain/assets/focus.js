// One view only (a notebook's report.show(view)): hide the other sections and open the view's tab.
// Registered last, so it runs after the other views have drawn.
"use strict";
window.bertkitViews = (window.bertkitViews || []).concat([function focusView(D, h) {
  if (!D.view) return;
  const own = { attributions: "attributions", lens: "lens" };
  const section = own[D.view] || "attention";
  document.querySelectorAll("main > section").forEach((s) => { s.hidden = s.id !== section; });
  document.querySelector("nav").hidden = true;
  if (section === "attention") h.$("tab-" + D.view).click();
}]);
