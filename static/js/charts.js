/* Draw every chart whose figure spec the page embeds as <script type="application/json" data-chart>. */
(function () {
  "use strict";
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
      window.Plotly.newPlot(target, fig.data || [], layout, {
        responsive: true,
        displaylogo: false,
        modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
      }).then(function () { target.setAttribute("data-rendered", "1"); });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
