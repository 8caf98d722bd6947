// The console's only script of its own (the CSP allows no inline script): draws the usage chart
// from its canvas's data-chart attribute, and wires the copy button of a new key's secret. Pages
// work without it; htmx (vendored) only enhances them.
(function () {
  "use strict";

  var charts = new WeakMap();

  function drawCharts(root) {
    if (typeof window.Chart === "undefined") return;
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      if (charts.has(canvas)) return;
      var spec = JSON.parse(canvas.getAttribute("data-chart"));
      var chart = new window.Chart(canvas, {
        type: "bar",
        data: { labels: spec.labels, datasets: spec.datasets },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          scales: {
            x: { stacked: true },
            y: { stacked: true, beginAtZero: true, title: { display: true, text: spec.metric } }
          },
          plugins: { legend: { position: "bottom" } }
        }
      });
      charts.set(canvas, chart);
      canvas.setAttribute("data-chart-ready", "true");
    });
  }

  function wireCopy(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) {
      button.hidden = false;
      if (button.getAttribute("data-copy-wired")) return;
      button.setAttribute("data-copy-wired", "true");
      button.addEventListener("click", function () {
        var field = document.getElementById(button.getAttribute("data-copy"));
        if (!field) return;
        field.select();
        var done = function () { button.textContent = "Copied"; };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(field.value).then(done, function () {});
        } else if (document.execCommand("copy")) {
          done();
        }
      });
    });
  }

  // A table wider than its box scrolls sideways; a phone shows no scroll bar until touched, so
  // a line above the box says so, while (and only while) it overflows.
  function hintScroll() {
    document.querySelectorAll(".scroll").forEach(function (box) {
      var hint = box.previousElementSibling;
      if (!hint || !hint.classList.contains("scroll-hint")) {
        hint = document.createElement("p");
        hint.className = "scroll-hint";
        hint.textContent = "Wider than the screen: scroll the table sideways for more columns \u2192";
        box.parentNode.insertBefore(hint, box);
      }
      hint.hidden = box.scrollWidth <= box.clientWidth + 1;
    });
  }

  function enhance(root) {
    drawCharts(root);
    wireCopy(root);
    hintScroll();
  }

  window.addEventListener("resize", hintScroll);

  document.addEventListener("DOMContentLoaded", function () { enhance(document); });
  // htmx swaps (boosted navigation, the models poll) bring new content.
  document.addEventListener("htmx:load", function (event) { enhance(event.target || document); });
})();
