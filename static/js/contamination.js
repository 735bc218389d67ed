/* Contamination-safe window: a two-thumb slider over the papers' first-commit dates.
   Without JavaScript the two date inputs and the submit button do the same job. */
(function () {
  "use strict";
  var form = document.getElementById("window-form");
  var dataNode = document.getElementById("window-papers");
  if (!form || !dataNode) return;
  var papers = JSON.parse(dataNode.textContent);
  var dates = papers.map(function (p) { return p.first_commit_date; }).filter(Boolean);
  dates = dates.filter(function (d, i) { return dates.indexOf(d) === i; }).sort();
  if (dates.length < 2) return;
  var fromInput = form.querySelector('input[name="from"]');
  var toInput = form.querySelector('input[name="to"]');

  function nearestIndex(value, fallback) {
    if (!value) return fallback;
    for (var i = 0; i < dates.length; i++) if (dates[i] >= value) return i;
    return dates.length - 1;
  }

  var wrap = document.createElement("div");
  wrap.className = "range-slider";
  var label = document.createElement("span");
  label.className = "live";
  label.id = "window-live";
  label.setAttribute("aria-live", "polite");
  var tracks = document.createElement("div");
  tracks.className = "tracks";
  var rail = document.createElement("div");
  rail.className = "rail";
  tracks.appendChild(rail);

  function makeRange(name, value) {
    var r = document.createElement("input");
    r.type = "range"; r.min = "0"; r.max = String(dates.length - 1); r.step = "1";
    r.value = String(value);
    r.setAttribute("aria-label", name);
    r.setAttribute("data-role", name === "Window start" ? "from" : "to");
    tracks.appendChild(r);
    return r;
  }
  var lo = makeRange("Window start", nearestIndex(fromInput.value, 0));
  var hiStart = toInput.value ? (function () {
    for (var i = dates.length - 1; i >= 0; i--) if (dates[i] <= toInput.value) return i;
    return 0;
  })() : dates.length - 1;
  var hi = makeRange("Window end", hiStart);
  wrap.appendChild(tracks);
  wrap.appendChild(label);
  form.insertBefore(wrap, form.firstChild);

  function update(source) {
    var a = parseInt(lo.value, 10), b = parseInt(hi.value, 10);
    if (a > b) { if (source === lo) { hi.value = a; b = a; } else { lo.value = b; a = b; } }
    fromInput.value = dates[a];
    toInput.value = dates[b];
    var n = 0, s = 0;
    papers.forEach(function (p) {
      if (p.first_commit_date && p.first_commit_date >= dates[a] && p.first_commit_date <= dates[b]) { n += 1; s += p.snippets || 0; }
    });
    label.textContent = dates[a] + " \u2192 " + dates[b] + ": " + n + " papers, " + s + " snippets" + (n < 5 ? " (few papers: figures are noisy)" : "");
  }
  lo.addEventListener("input", function () { update(lo); });
  hi.addEventListener("input", function () { update(hi); });
  // moving a thumb and letting go recomputes the server-side tables for the new window
  lo.addEventListener("change", function () { form.submit(); });
  hi.addEventListener("change", function () { form.submit(); });
  update(null);
})();
