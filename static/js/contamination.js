/* Contamination-safe window: a two-thumb slider over the papers' first-commit dates.
   One window: the form's two date inputs hold it; the slider moves them, and the summary cards
   (#window-summary) say what they hold, live. A pointer letting go of a thumb applies the window
   (the page reloads with it); arrow keys only move it, Enter or "Apply window" applies it, so the
   keyboard never loses its place. Without JavaScript the date inputs and the button do the job. */
(function () {
  "use strict";
  var form = document.getElementById("window-form");
  var dataNode = document.getElementById("window-papers");
  if (!form || !dataNode) return;
  var papers = JSON.parse(dataNode.textContent);  // the papers a window can count (dated, scorable)
  var dates = papers.map(function (p) { return p.first_commit_date; }).filter(Boolean);
  dates = dates.filter(function (d, i) { return dates.indexOf(d) === i; }).sort();
  if (dates.length < 2) return;
  var fromInput = form.querySelector('input[name="from"]');
  var toInput = form.querySelector('input[name="to"]');
  var applied = fromInput.value + "|" + toInput.value;
  var FOCUS_KEY = "rcb-window-focus";

  function byId(id) { return document.getElementById(id); }
  function firstAtOrAfter(value) {
    if (!value) return 0;
    for (var i = 0; i < dates.length; i++) if (dates[i] >= value) return i;
    return dates.length - 1;
  }
  function lastAtOrBefore(value) {
    if (!value) return dates.length - 1;
    for (var i = dates.length - 1; i >= 0; i--) if (dates[i] <= value) return i;
    return 0;
  }

  var wrap = document.createElement("div");
  wrap.className = "range-slider";
  var tracks = document.createElement("div");
  tracks.className = "tracks";
  var rail = document.createElement("div");
  rail.className = "rail";
  tracks.appendChild(rail);
  function makeRange(name, role, value) {
    var r = document.createElement("input");
    r.type = "range"; r.min = "0"; r.max = String(dates.length - 1); r.step = "1";
    r.value = String(value);
    r.setAttribute("aria-label", name);
    r.setAttribute("data-role", role);
    tracks.appendChild(r);
    return r;
  }
  var lo = makeRange("Window start (first commit on or after)", "from", firstAtOrAfter(fromInput.value));
  var hi = makeRange("Window end (first commit on or before)", "to", lastAtOrBefore(toInput.value));
  wrap.appendChild(tracks);
  form.insertBefore(wrap, form.firstChild);

  // the cards and the live line say what the date inputs hold
  function describe() {
    var from = fromInput.value, to = toInput.value, n = 0, s = 0, lines = 0;
    papers.forEach(function (p) {
      var d = p.first_commit_date;
      if (d && (!from || d >= from) && (!to || d <= to)) { n += 1; s += p.snippets || 0; lines += p.weight || 0; }
    });
    byId("window-lines").textContent = n ? " (" + lines + " lines)" : "";
    byId("window-paper-count").textContent = String(n);
    byId("window-paper-noun").textContent = n === 1 ? "paper" : "papers";
    byId("window-snippet-count").textContent = String(s);
    byId("window-from-text").textContent = from || "the first paper";
    byId("window-to-text").textContent = to || "today";
    var what = (n === 0 ? "No paper" : n + (n === 1 ? " paper, " : " papers, ") + s + (s === 1 ? " snippet" : " snippets")) +
      " from " + (from || "the first paper") + " to " + (to || "today");
    if (n > 0 && n < 5) what += " (few papers: figures are noisy)";
    var pending = from + "|" + to !== applied;
    byId("window-live").textContent = what + (pending ? ". Not applied yet: press Enter or Apply window." : ".");
  }
  function fromSlider(source) {
    var a = parseInt(lo.value, 10), b = parseInt(hi.value, 10);
    var pushed = a > b;
    if (pushed) { if (source === lo) { hi.value = a; b = a; } else { lo.value = b; a = b; } }
    // only the moved thumb's date changes (and the other's when pushed along): a date typed in
    // between two papers stays as typed
    if (source === lo || pushed) fromInput.value = dates[a];
    if (source === hi || pushed) toInput.value = dates[b];
    describe();
  }
  function fromDates() {
    lo.value = String(firstAtOrAfter(fromInput.value));
    hi.value = String(lastAtOrBefore(toInput.value));
    describe();
  }
  function apply(thumb) {
    if (fromInput.value + "|" + toInput.value === applied) return;
    try { window.sessionStorage.setItem(FOCUS_KEY, thumb ? thumb.getAttribute("data-role") : ""); } catch (e) { /* private mode */ }
    form.submit();
  }

  [lo, hi].forEach(function (thumb) {
    var pointer = false;
    thumb.addEventListener("input", function () { fromSlider(thumb); });
    thumb.addEventListener("pointerdown", function () { pointer = true; });
    // a pointer letting go applies; a key's change event (every arrow press) does not
    thumb.addEventListener("change", function () { if (pointer) { pointer = false; apply(thumb); } });
    thumb.addEventListener("keydown", function (event) {
      pointer = false;
      if (event.key === "Enter") { event.preventDefault(); apply(thumb); }
    });
  });
  fromInput.addEventListener("input", fromDates);
  toInput.addEventListener("input", fromDates);
  form.addEventListener("submit", function () {
    try { window.sessionStorage.removeItem(FOCUS_KEY); } catch (e) { /* private mode */ }
  });

  // after a reload the thumb that applied the window has the focus again
  try {
    var role = window.sessionStorage.getItem(FOCUS_KEY);
    window.sessionStorage.removeItem(FOCUS_KEY);
    if (role) (role === "from" ? lo : hi).focus();
  } catch (e) { /* private mode */ }
  describe();
})();
