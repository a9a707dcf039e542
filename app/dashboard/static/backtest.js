// Draws one series' backtest windows: the actual values, and each model's median with its interval band, on one
// time axis (gaps between windows stay gaps).
(function () {
  "use strict";
  var COLORS = ["#0969da", "#bf3989", "#1a7f37", "#9a6700"];
  var FILLS = ["rgba(9, 105, 218, 0.12)", "rgba(191, 57, 137, 0.12)", "rgba(26, 127, 55, 0.12)",
               "rgba(154, 103, 0, 0.12)"];

  function epoch(ts) {
    var zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(ts) ? ts : ts + "Z";
    return Date.parse(zoned) / 1000;
  }

  function widthOf(el) {
    return Math.max(280, Math.floor(el.getBoundingClientRect().width || el.parentElement.clientWidth || 600));
  }

  var el = document.getElementById("backtest-chart");
  var source = document.getElementById("backtest-data");
  if (!el || !source || typeof uPlot === "undefined") return;
  var chart = JSON.parse(source.textContent);
  var data = [chart.timestamps.map(epoch), chart.actual];
  var series = [{ label: "Time" }, { label: "Actual", stroke: "#24292f", width: 2,
                                     points: { show: true, size: 5 } }];
  var bands = [];
  Object.keys(chart.models).forEach(function (model, n) {
    var lines = chart.models[model];
    var color = COLORS[n % COLORS.length];
    var at = data.length;
    data.push(lines.median, lines.lower, lines.upper);
    series.push({ label: model, stroke: color, width: 2, points: { show: true, size: 4 } },
                { label: model + " lower", stroke: color, width: 1, dash: [4, 4] },
                { label: model + " upper", stroke: color, width: 1, dash: [4, 4] });
    bands.push({ series: [at + 2, at + 1], fill: FILLS[n % FILLS.length] });
  });
  var height = 320;
  var plot = new uPlot({
    width: widthOf(el), height: height, series: series, bands: bands,
    scales: { x: { time: true }, y: { range: window.dashboardCharts.valueRange } },
    axes: [{}, { values: window.dashboardCharts.valueLabels, size: window.dashboardCharts.labelWidth }],
    tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }
  }, data, el);
  el.uplot = plot;
  el.setAttribute("data-windows", String(chart.cutoffs.length));
  el.setAttribute("data-models", String(Object.keys(chart.models).length));
  var last = widthOf(el);
  window.addEventListener("resize", function () {
    var now = widthOf(el);
    if (now !== last) { last = now; plot.setSize({ width: now, height: height }); }
  });
})();
