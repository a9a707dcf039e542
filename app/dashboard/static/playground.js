// The playground: builds a POST /forecast from a CSV, sends it with the session (cookie + CSRF header),
// and draws history, median and interval band; API errors are shown exactly as the API words them.
(function () {
  "use strict";
  var script = document.currentScript;
  var samplesUrl = script.getAttribute("data-samples-url");
  var csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  var form = document.getElementById("playground-form");
  var csv = document.getElementById("csv");
  var csvError = document.getElementById("csv-error");
  var sample = document.getElementById("sample");
  var model = document.getElementById("model");
  var errorBox = document.getElementById("api-error");
  var result = document.getElementById("result");
  var runButton = document.getElementById("run-forecast");
  var downloads = [];

  function describeModel() {
    var option = model.options[model.selectedIndex];
    document.getElementById("model-description").textContent = option ? option.getAttribute("data-description") : "";
  }
  model.addEventListener("change", describeModel);
  describeModel();

  sample.addEventListener("change", function () {
    if (!sample.value) return;
    fetch(samplesUrl + encodeURIComponent(sample.value) + ".json", { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (s) {
        csv.value = "timestamp,value\n" + s.timestamps.map(function (t, i) { return t + "," + s.values[i]; }).join("\n");
        document.getElementById("data_frequency").value = s.data_frequency;
        if (s.forecast_horizon) document.getElementById("horizon").value = s.forecast_horizon;
      });
  });

  function showCsvError(message) {
    csvError.textContent = message;
    csvError.hidden = !message;
    if (message) csv.setAttribute("aria-invalid", "true"); else csv.removeAttribute("aria-invalid");
  }

  // Only the CSV's shape is checked here; what the values and timestamps mean is the API's to judge.
  function parseCsv(text) {
    var timestamps = [], values = [];
    var lines = text.split(/\r?\n/);
    for (var n = 0; n < lines.length; n++) {
      var line = lines[n].trim();
      if (!line) continue;
      var cells = line.split(",");
      if (cells.length !== 2) throw new Error("Line " + (n + 1) + ": expected timestamp,value, found " + cells.length + (cells.length === 1 ? " column." : " columns."));
      var ts = cells[0].trim(), raw = cells[1].trim();
      if (timestamps.length === 0 && values.length === 0 && isNaN(Number(raw)) && /[a-z]/i.test(ts) && !/\d/.test(ts)) continue;
      timestamps.push(ts);
      values.push(raw === "" ? null : (isNaN(Number(raw)) ? raw : Number(raw)));
    }
    if (!timestamps.length) throw new Error("Paste at least one timestamp,value line or pick a sample.");
    return { timestamps: timestamps, values: values };
  }

  // A date alone is that day's midnight at any frequency (docs/contract.md, section 7): it is sent as typed, and
  // charted at that midnight.
  var DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;

  function epoch(ts) {
    if (DATE_ONLY.test(ts)) ts += "T00:00:00";
    var zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(ts) ? ts : ts + "Z";
    return Date.parse(zoned) / 1000;
  }

  function text(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  // One line per problem of details.errors: where, what, and what was sent or expected.
  function problemLine(problem) {
    var where = problem.field || "body";
    if (problem.index !== undefined && problem.index !== null) where += " [" + problem.index + "]";
    var line = where + ": " + (problem.issue || "");
    if (problem.provided !== undefined && problem.provided !== null) line += " (sent: " + text(problem.provided) + ")";
    if (problem.expected !== undefined && problem.expected !== null) line += " (expected: " + text(problem.expected) + ")";
    return line;
  }

  function showApiError(status, body) {
    var error = (body && body.error) || { code: "HTTP " + status, message: "The server answered " + status + "." };
    var details = error.details || {};
    document.getElementById("api-error-message").textContent = error.code + ": " + error.message;
    var list = document.getElementById("api-error-details");
    list.innerHTML = "";
    Object.keys(details).forEach(function (name) {
      if (name === "errors" && Array.isArray(details.errors)) return;  // listed in full below
      var row = document.createElement("div");
      var dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = name;
      dd.textContent = text(details[name]);
      row.appendChild(dt); row.appendChild(dd); list.appendChild(row);
    });
    var problems = document.getElementById("api-error-problems");
    var items = document.getElementById("api-error-list");
    items.innerHTML = "";
    var all = Array.isArray(details.errors) ? details.errors : [];
    all.forEach(function (problem) {
      var item = document.createElement("li");
      item.textContent = problemLine(problem);
      items.appendChild(item);
    });
    problems.hidden = all.length === 0;
    errorBox.hidden = false;
    errorBox.focus();
  }

  function setDownloads(request, body) {
    downloads.forEach(URL.revokeObjectURL);
    var rows = ["timestamp,lower_bound,median,upper_bound"];
    body.forecast_timestamps.forEach(function (t, i) {
      rows.push([t, body.lower_bound[i], body.median[i], body.upper_bound[i]].join(","));
    });
    var csvUrl = URL.createObjectURL(new Blob([rows.join("\n") + "\n"], { type: "text/csv" }));
    var jsonUrl = URL.createObjectURL(new Blob([JSON.stringify({ request: request, response: body }, null, 2)],
                                               { type: "application/json" }));
    downloads = [csvUrl, jsonUrl];
    document.getElementById("download-csv").href = csvUrl;
    document.getElementById("download-json").href = jsonUrl;
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    errorBox.hidden = true;
    var series;
    try { series = parseCsv(csv.value); showCsvError(""); }
    catch (e) { showCsvError(e.message); csv.focus(); return; }
    var frequency = document.getElementById("data_frequency").value;
    var horizonRaw = document.getElementById("horizon").value;
    var request = {
      series: [series],
      forecast_horizon: /^\d+$/.test(horizonRaw) ? Number(horizonRaw) : horizonRaw,
      data_frequency: frequency,
      forecast_frequency: frequency,
      confidence: Number(document.getElementById("confidence").value)
    };
    runButton.disabled = true;
    runButton.textContent = "Running…";
    fetch("/forecast", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf, "X-Model-Id": model.value },
      body: JSON.stringify(request)
    }).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (body) {
        if (!response.ok) { result.hidden = true; showApiError(response.status, body); return; }
        var history = { x: series.timestamps.map(epoch), y: series.values };
        var forecast = { x: body.forecast_timestamps.map(epoch), median: body.median, lower: body.lower_bound,
                         upper: body.upper_bound };
        result.hidden = false;
        var used = response.headers.get("X-Model-Id") || model.value;
        document.getElementById("result-summary").textContent = body.median.length + " points forecast by " + used +
          " from " + series.values.length + " points of history, with a " + Math.round(request.confidence * 100) +
          "% interval.";
        window.dashboardCharts.forecastChart(document.querySelector("#forecast-chart .chart-area"), history, forecast);
        setDownloads(request, body);
      });
    }).catch(function (e) {
      showApiError(0, { error: { code: "NETWORK", message: "The request did not reach the server: " + e.message } });
    }).finally(function () {
      runButton.disabled = false;
      runButton.textContent = "Run forecast";
    });
  });
})();
