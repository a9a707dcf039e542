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

  // Only the CSV's shape is checked here; what the values and timestamps mean is the API's to judge. Columns past
  // the value are covariates, named by a header line; rows after the history with an empty value carry their
  // values over the horizon (a covariate whose cells there are all empty is known only in the past).
  function parseCsv(text) {
    var rows = [], names = null, width = null;
    var lines = text.split(/\r?\n/);
    for (var n = 0; n < lines.length; n++) {
      var line = lines[n].trim();
      if (!line) continue;
      var cells = line.split(",").map(function (cell) { return cell.trim(); });
      if (width === null) width = cells.length;
      if (cells.length < 2) throw new Error("Line " + (n + 1) + ": expected timestamp,value, found 1 column.");
      if (cells.length !== width) throw new Error("Line " + (n + 1) + ": expected " + width + " columns, found " + cells.length + ".");
      if (!rows.length && names === null && isNaN(Number(cells[1])) && /[a-z]/i.test(cells[0]) && !/\d/.test(cells[0])) {
        names = cells.slice(2);
        continue;
      }
      rows.push({ n: n + 1, cells: cells });
    }
    if (width > 2 && names === null) throw new Error("Name the covariate columns in a header line: timestamp,value,name,...");
    var history = rows, future = [];
    if (width > 2) {  // the future rows: the trailing run of rows with no value
      var cut = rows.length;
      while (cut > 0 && rows[cut - 1].cells[1] === "") cut--;
      history = rows.slice(0, cut); future = rows.slice(cut);
    }
    if (!history.length) throw new Error("Paste at least one timestamp,value line or pick a sample.");
    var series = {
      timestamps: history.map(function (r) { return r.cells[0]; }),
      values: history.map(function (r) { return cellValue(r.cells[1]); })
    };
    if (names && names.length) {
      series.covariates = names.map(function (name, k) {
        var past = history.map(function (r) { return r.cells[k + 2]; });
        var ahead = future.map(function (r) { return r.cells[k + 2]; });
        var numeric = past.every(function (cell) { return cell !== "" && !isNaN(Number(cell)); });
        var convert = function (cell) { return cell === "" ? null : (numeric ? Number(cell) : cell); };
        var covariate = { name: name, history: past.map(convert) };
        if (ahead.some(function (cell) { return cell !== ""; })) covariate.future = ahead.map(convert);
        return covariate;
      });
    }
    return series;
  }

  function cellValue(raw) {
    return raw === "" ? null : (isNaN(Number(raw)) ? raw : Number(raw));
  }

  var country = document.getElementById("holiday-country");
  var subdivision = document.getElementById("holiday-subdivision");
  country.addEventListener("change", function () {
    var option = country.options[country.selectedIndex];
    var codes = (option && option.getAttribute("data-subdivisions")) || "";
    subdivision.innerHTML = "";
    var whole = document.createElement("option");
    whole.value = ""; whole.textContent = "— whole country —";
    subdivision.appendChild(whole);
    codes.split(",").filter(Boolean).forEach(function (code) {
      var item = document.createElement("option");
      item.value = code; item.textContent = code;
      subdivision.appendChild(item);
    });
    subdivision.disabled = !codes;
  });

  // The request's holidays and calendar_features, as POST /forecast takes them (docs/covariates.md).
  function covariateFields(request) {
    if (country.value) {
      var windowRaw = document.getElementById("holiday-window").value;
      request.holidays = { country: country.value, window: /^\d+$/.test(windowRaw) ? Number(windowRaw) : windowRaw };
      if (subdivision.value) request.holidays.subdivision = subdivision.value;
    }
    var features = Array.prototype.filter.call(document.querySelectorAll('input[name="calendar_features"]'),
                                                function (box) { return box.checked; })
      .map(function (box) { return box.value; });
    if (features.length) request.calendar_features = features;
  }

  function showCovariates(answer) {
    var box = document.getElementById("covariates-result");
    box.hidden = !answer;
    if (!answer) return;
    var summary = answer.used ? "Used by the model: " : "Not used (the forecast without them answered): ";
    summary += answer.names.join(", ") + ".";
    if (answer.note) summary += " " + answer.note;
    document.getElementById("covariates-summary").textContent = summary;
    var list = document.getElementById("holidays-in-horizon");
    list.innerHTML = "";
    answer.holidays_in_horizon.forEach(function (holiday) {
      var item = document.createElement("li");
      item.textContent = holiday.date + ": " + holiday.name;
      list.appendChild(item);
    });
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
    covariateFields(request);
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
        showCovariates(body.covariates);
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
