/* Draw every chart whose figure spec the page embeds as <script type="application/json" data-chart>. */
(function () {
  "use strict";
  var NARROW = 560;  // px: below this a chart's category labels are shortened (hover shows them whole)
  var LABEL_CHARS = 14;

  function shortLabels(fig, layout) {
    var names = [];
    (fig.data || []).forEach(function (trace) {
      (trace.y || []).forEach(function (y) {
        if (typeof y === "string" && names.indexOf(y) < 0) names.push(y);
      });
    });
    if (!names.length || (layout.yaxis && layout.yaxis.visible === false)) return;
    layout.yaxis = layout.yaxis || {};
    layout.yaxis.tickvals = names;
    layout.yaxis.ticktext = names.map(function (n) {
      return n.length > LABEL_CHARS ? n.slice(0, LABEL_CHARS - 1) + "\u2026" : n;
    });
    layout.yaxis.tickfont = { size: 11 };
    if (layout.xaxis && layout.xaxis.title) layout.xaxis.title.font = { size: 11 };
  }

  function draw() {
    if (typeof window.Plotly === "undefined") return;
    var specs = document.querySelectorAll('script[type="application/json"][data-chart]');
    Array.prototype.forEach.call(specs, function (node) {
      var target = document.getElementById(node.getAttribute("data-chart"));
      if (!target) return;
      var fig;
      try { fig = JSON.parse(node.textContent); } catch (e) { return; }
      var layout = fig.layout || {};
      layout.autosize = true;
      if (target.clientWidth < NARROW) shortLabels(fig, layout);
      window.Plotly.newPlot(target, fig.data || [], layout, {
        responsive: true,
        displaylogo: false,
        displayModeBar: target.clientWidth < NARROW ? false : "hover",  // on a phone it would cover the top bars
        modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
      }).then(function () { target.setAttribute("data-rendered", "1"); });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
