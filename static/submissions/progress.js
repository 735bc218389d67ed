// Live progress of a submission page: polls the JSON API while the submission is queued or running.
// Without JavaScript the page offers a plain "Refresh" link instead.
(function () {
  "use strict";
  var box = document.getElementById("progress");
  if (!box || box.getAttribute("data-active") !== "1") { return; }
  var url = box.getAttribute("data-progress-url");
  var hint = document.getElementById("refresh-hint");
  if (hint) { hint.firstChild.textContent = "This page updates itself every few seconds. "; }
  var failures = 0;

  function text(el, value) { if (el) { el.textContent = value; } }

  function render(data) {
    var p = data.progress;
    var bar = document.getElementById("progress-bar");
    if (bar) { bar.max = p.total || 1; bar.value = p.done; bar.textContent = p.percent + " %"; }
    text(document.getElementById("progress-text"), p.done + " / " + p.total + " snippets (" + p.percent + " %)");
    text(document.getElementById("submission-status"), data.status);
    p.papers.forEach(function (row) {
      var tr = box.querySelector('tr[data-paper="' + CSS.escape(row.paper) + '"]');
      if (!tr) { return; }
      text(tr.querySelector(".js-status"), row.status);
      text(tr.querySelector(".js-count"), row.done + " / " + row.total);
      text(tr.querySelector(".js-error"), row.error || "");
    });
    return !p.active;
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (data) {
        failures = 0;
        if (render(data)) { window.location.reload(); return; }  // the end: show results and actions
        window.setTimeout(poll, 2000);
      })
      .catch(function () {
        failures += 1;
        window.setTimeout(poll, Math.min(30000, 2000 * Math.pow(2, failures)));
      });
  }
  window.setTimeout(poll, 1500);
})();
