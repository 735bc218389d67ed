/* Progressive enhancement shared by every page: click-to-sort tables, copy buttons. Pages work without it. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) return "";
    var raw = cell.getAttribute("data-value");
    return raw === null ? cell.textContent.trim() : raw;
  }

  function compare(a, b, numeric) {
    if (numeric) {
      var x = parseFloat(a), y = parseFloat(b);
      var xn = isNaN(x), yn = isNaN(y);
      if (xn && yn) return 0;
      if (xn) return 1;   // empty values sink to the bottom whatever the direction
      if (yn) return -1;
      return x - y;
    }
    return a.localeCompare(b, undefined, { sensitivity: "base", numeric: true });
  }

  function sortTable(table, th) {
    var headers = Array.prototype.slice.call(th.parentNode.cells);
    var index = headers.indexOf(th);
    var numeric = th.getAttribute("data-type") === "number";
    var current = th.getAttribute("aria-sort");
    var dir = current === "descending" ? "ascending" : "descending";
    if (!numeric && current !== "ascending") dir = "ascending";
    headers.forEach(function (h) { if (h.hasAttribute("aria-sort")) h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", dir);
    Array.prototype.forEach.call(table.tBodies, function (body) {
      var rows = Array.prototype.slice.call(body.rows);
      // baseline rows stay pinned at the bottom: they are references, not competitors
      var pinned = rows.filter(function (r) { return r.classList.contains("baseline"); });
      var ranked = rows.filter(function (r) { return !r.classList.contains("baseline"); });
      ranked.sort(function (ra, rb) {
        var va = cellValue(ra, index), vb = cellValue(rb, index);
        if (numeric && (isNaN(parseFloat(va)) || isNaN(parseFloat(vb)))) return compare(va, vb, true);
        var c = compare(va, vb, numeric);
        return dir === "ascending" ? c : -c;
      });
      ranked.concat(pinned).forEach(function (r) { body.appendChild(r); });
    });
    var status = document.getElementById(table.getAttribute("data-status") || "");
    if (status) status.textContent = "Sorted by " + th.textContent.trim() + ", " + dir + ".";
  }

  // a long masked file opens scrolled to the TODO block the model had to fill in
  function scrollToTodo() {
    Array.prototype.forEach.call(document.querySelectorAll(".masked-view .highlight"), function (box) {
      var mark = box.querySelector(".hll");
      if (mark) box.scrollTop = Math.max(0, mark.offsetTop - box.offsetTop - 120);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scrollToTodo);
  else scrollToTodo();

  // a block that scrolls sideways (code, wide tables, outputs) takes keyboard focus, so arrow keys can
  // scroll it (WCAG 2.1.1); checked again when the window's width changes what overflows
  var SCROLLERS = "main pre, main .highlight, main .table-wrap, main .chart-scroll, main .math-display";
  function scrollersFocusable() {
    Array.prototype.forEach.call(document.querySelectorAll(SCROLLERS), function (box) {
      var scrolls = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (scrolls && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("data-scroll-focus", "1");
      } else if (!scrolls && box.getAttribute("data-scroll-focus") === "1") {
        box.removeAttribute("tabindex");
        box.removeAttribute("data-scroll-focus");
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scrollersFocusable);
  else scrollersFocusable();
  window.addEventListener("load", scrollersFocusable);
  window.addEventListener("resize", scrollersFocusable);

  // the phone menu: one button folds the main navigation (CSS hides it on narrow screens under .js)
  function menuToggle() {
    var button = document.querySelector("button.nav-toggle");
    var header = document.querySelector("header.site-header");
    if (!button || !header) return;
    button.hidden = false;
    button.addEventListener("click", function () {
      var open = header.classList.toggle("nav-open");
      button.setAttribute("aria-expanded", open ? "true" : "false");
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", menuToggle);
  else menuToggle();

  // copy buttons: <button class="js-copy" data-copy-target="ID" hidden> copies the element's text
  // (shown only where the clipboard API exists; a status element after it says what happened)
  function copyButtons() {
    if (!navigator.clipboard) return;
    document.querySelectorAll("button.js-copy[data-copy-target]").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var target = document.getElementById(button.getAttribute("data-copy-target"));
        var status = button.parentNode.querySelector(".js-copy-status");
        if (!target) return;
        navigator.clipboard.writeText(target.textContent.trim()).then(function () {
          if (status) status.textContent = "Copied.";
        }, function () {
          if (status) status.textContent = "Copy failed: select the text and copy it by hand.";
        });
      });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", copyButtons);
  else copyButtons();

  document.addEventListener("click", function (event) {
    var link = event.target.closest("table.sortable thead th[data-sort] a");
    if (!link) return;
    var th = link.closest("th");
    var table = th.closest("table");
    event.preventDefault();
    sortTable(table, th);
    if (window.history && window.history.replaceState) {
      // keep the server-side URL in step so a reload or a shared link shows the same order
      var url = new URL(link.href, window.location.href);
      url.searchParams.set("dir", th.getAttribute("aria-sort") === "ascending" ? "asc" : "desc");
      window.history.replaceState(null, "", url.pathname + url.search);
    }
  });
})();
