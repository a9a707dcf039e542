// Chart helpers over the vendored uPlot: sizes follow the container, so pages work at 390 px and 1280 px.
(function () {
  "use strict";
  var COLORS = { "2xx": "#1a7f37", "4xx": "#9a6700", "429": "#8250df", "5xx": "#cf222e" };
  var HOUR = 3600, DAY = 86400;

  function widthOf(el) {
    return Math.max(280, Math.floor(el.getBoundingClientRect().width || el.parentElement.clientWidth || 600));
  }

  function keepSized(plot, el, height) {
    var last = widthOf(el);
    window.addEventListener("resize", function () {
      var now = widthOf(el);
      if (now !== last) { last = now; plot.setSize({ width: now, height: height }); }
    });
  }

  // The value axis's range: uPlot's own, except where the values (nearly) all agree: differences under a
  // ten-thousandth of the value are drawn flat, on an axis padded a tenth of the value (1 around 0) either side,
  // rather than stretched over the whole height with the same label on every tick ("1, 1, 1").
  function valueRange(u, min, max) {
    if (min == null || max == null) return [0, 1];
    var size = Math.max(Math.abs(min), Math.abs(max));
    if (max - min <= size * 1e-4) {
      var middle = (min + max) / 2, pad = size ? size / 10 : 1;
      return [middle - pad, middle + pad];
    }
    return uPlot.rangeNum(min, max, 0.1, true);
  }

  // The value axis's tick labels, with as many decimals as the tick spacing needs: uPlot's default keeps at most
  // three, so ticks closer than that (a series that hardly moves) all read the same.
  function valueLabels(u, splits, axis, space, incr) {
    var decimals = Math.max(0, -Math.floor(Math.log10(incr) + 1e-9));
    while (decimals < 20 && Math.abs(incr * Math.pow(10, decimals) - Math.round(incr * Math.pow(10, decimals))) > 1e-6) {
      decimals++;
    }
    return splits.map(function (v) {
      return v == null ? "" : v.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
    });
  }

  // The value axis as wide as its longest label, so that no label is cut at the chart's left edge.
  function labelWidth(u, values) {
    var longest = (values || []).reduce(function (n, v) { return Math.max(n, String(v).length); }, 0);
    return Math.max(50, 16 + 7 * longest);
  }

  function usageChart(el, series, spanHours) {
    var height = 220;
    var bars = uPlot.paths.bars({ size: [0.8, 40], gap: 1 });
    var outcomes = ["2xx", "4xx", "429", "5xx"];
    // Stacked: each drawn series is the sum of itself and those below it, so bars sit on top of each other.
    var stacked = [];
    var running = series.hours.map(function () { return 0; });
    outcomes.forEach(function (o) {
      running = running.map(function (v, i) { return v + series[o][i]; });
      stacked.push(running.slice());
    });
    var data = [series.hours].concat(stacked.slice().reverse());
    var drawn = outcomes.slice().reverse().map(function (o) {
      return { label: o, stroke: COLORS[o], fill: COLORS[o], paths: bars, points: { show: false },
               value: function (u, v, si, i) { return i == null ? "-" : series[o][i]; } };
    });
    var opts = {
      width: widthOf(el), height: height,
      series: [{ label: "Hour (UTC)" }].concat(drawn),
      // Ticks on whole hours, or on UTC midnights for the week, so each date is labelled once.
      axes: [spanHours > 24 ? { values: "{MM}-{DD}", incrs: [DAY, 2 * DAY, 7 * DAY] }
                            : { values: "{HH}:00", incrs: [HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR] },
             { label: "requests" }],
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      legend: { live: true }
    };
    var plot = new uPlot(opts, data, el);
    el.uplot = plot;
    keepSized(plot, el, height);
    return plot;
  }

  function forecastChart(el, history, forecast) {
    var height = 320;
    // One x axis for history and forecast; gaps (null) keep each line to its own part.
    var xs = history.x.concat(forecast.x);
    var nh = history.x.length, nf = forecast.x.length;
    var pad = function (n) { var a = []; for (var i = 0; i < n; i++) a.push(null); return a; };
    var data = [
      xs,
      history.y.concat(pad(nf)),
      pad(nh).concat(forecast.median),
      pad(nh).concat(forecast.lower),
      pad(nh).concat(forecast.upper)
    ];
    var opts = {
      width: widthOf(el), height: height,
      series: [
        { label: "Time" },
        { label: "History", stroke: "#24292f", width: 1.5 },
        { label: "Median", stroke: "#0969da", width: 2 },
        { label: "Lower", stroke: "#54aeff", dash: [4, 4] },
        { label: "Upper", stroke: "#54aeff", dash: [4, 4] }
      ],
      bands: [{ series: [4, 3], fill: "rgba(9, 105, 218, 0.15)" }],
      scales: { x: { time: true }, y: { range: valueRange } },
      axes: [{}, { values: valueLabels, size: labelWidth }],
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }
    };
    if (el.uplot) el.uplot.destroy();
    el.innerHTML = "";
    var plot = new uPlot(opts, data, el);
    el.uplot = plot;
    el.setAttribute("data-history-points", String(nh));
    el.setAttribute("data-forecast-points", String(nf));
    keepSized(plot, el, height);
    return plot;
  }

  function epoch(ts) {
    var zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(ts) ? ts : ts + "Z";
    return Date.parse(zoned) / 1000;
  }

  function monitorChart(el, s) {
    var height = 260;
    var data = [
      s.timestamps.map(epoch), s.value, s.expected, s.lower, s.upper,
      s.value.map(function (v, i) { return s.anomaly[i] ? v : null; })
    ];
    var opts = {
      width: widthOf(el), height: height,
      series: [
        { label: "Time" },
        { label: "Value", stroke: "#24292f", width: 1.5 },
        { label: "Expected", stroke: "#0969da", dash: [4, 4] },
        { label: "Lower", stroke: "#54aeff", width: 1 },
        { label: "Upper", stroke: "#54aeff", width: 1 },
        { label: "Anomaly", stroke: "#cf222e", width: 0, paths: function () { return null; },
          points: { show: true, size: 9, fill: "#cf222e", stroke: "#cf222e" } }
      ],
      bands: [{ series: [4, 3], fill: "rgba(9, 105, 218, 0.12)" }],
      scales: { x: { time: true }, y: { range: valueRange } },
      axes: [{}, { values: valueLabels, size: labelWidth }],
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }
    };
    var plot = new uPlot(opts, data, el);
    el.uplot = plot;
    keepSized(plot, el, height);
    return plot;
  }

  window.dashboardCharts = { usageChart: usageChart, forecastChart: forecastChart, monitorChart: monitorChart,
                             valueRange: valueRange, valueLabels: valueLabels,
                             labelWidth: labelWidth };
})();
