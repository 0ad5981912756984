// The admin's usage charts. The page passes its numbers in <script type="application/json"
// id="usage-data"> (Django's json_script); no inline script, so a strict CSP holds.
(function () {
  "use strict";

  function start() {
    var source = document.getElementById("usage-data");
    if (!source || typeof window.Chart === "undefined") return;
    var data = JSON.parse(source.textContent);
    var Chart = window.Chart;
    Chart.defaults.animation = false;
    Chart.defaults.maintainAspectRatio = false;

    function draw(id, config) {
      var canvas = document.getElementById(id);
      if (!canvas) return;
      canvas.parentNode.style.height = "260px";
      new Chart(canvas, config);
    }

    draw("chart-tokens", {
      type: "bar",
      data: {
        labels: data.days,
        datasets: [
          { label: "Prompt tokens", data: data.prompt_tokens, backgroundColor: "#79aec8" },
          { label: "Completion tokens", data: data.completion_tokens, backgroundColor: "#417690" },
        ],
      },
      options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } },
    });

    draw("chart-hourly", {
      type: "bar",
      data: {
        labels: data.hours,
        datasets: [
          { label: "Requests", data: data.hourly_requests, backgroundColor: "#417690" },
          { label: "Refused", data: data.hourly_rejected, backgroundColor: "#ba2121" },
        ],
      },
      options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } },
    });

    draw("chart-ttft", {
      type: "line",
      data: {
        labels: data.days,
        datasets: [
          { label: "p50", data: data.ttft_p50, borderColor: "#417690", spanGaps: true },
          { label: "p95", data: data.ttft_p95, borderColor: "#ba2121", spanGaps: true },
          { label: "p99", data: data.ttft_p99, borderColor: "#7a4b00", borderDash: [4, 3], spanGaps: true },
        ],
      },
      options: { scales: { y: { beginAtZero: true, title: { display: true, text: "ms" } } } },
    });
    document.body.setAttribute("data-charts-ready", "1");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
