// Keeps the batches table's progress current: polls the page's JSON twin while any listed batch is queued or
// running, and updates each row in place (bar with its failed share, counts, status, finish time, links).
(function () {
  "use strict";
  var UNFINISHED = { queued: true, running: true };
  var POLL_MS = 2000;

  function when(text) {
    return text ? text.slice(0, 16).replace("T", " ") + " UTC" : "\u2014";
  }

  function count(n) {
    return n.toLocaleString("en-US");
  }

  function update(row, batch) {
    var finished = batch.progress.done + batch.progress.failed;
    var bar = row.querySelector(".bar");
    bar.setAttribute("aria-valuemax", String(batch.progress.total));
    bar.setAttribute("aria-valuenow", String(finished));
    bar.querySelector(".bar-done").style.width = batch.shares.done + "%";
    bar.querySelector(".bar-failed").style.width = batch.shares.failed + "%";
    var shown = row.querySelector(".count");
    shown.textContent = count(finished) + " / " + count(batch.progress.total);
    if (batch.progress.failed) {
      var failed = document.createElement("span");
      failed.className = "failed-count";
      failed.textContent = count(batch.progress.failed) + " failed";
      shown.appendChild(document.createTextNode(", "));
      shown.appendChild(failed);
    }
    row.querySelector(".status").textContent = batch.status;
    row.className = "status-" + batch.status;
    row.querySelector(".finished").textContent = when(batch.finished_at);
    var cell = row.querySelector(".results");
    cell.textContent = "";
    if (batch.download_url) {
      var link = document.createElement("a");
      link.href = batch.download_url;
      link.setAttribute("download", "");
      link.textContent = "CSV";
      cell.appendChild(link);
      if (batch.backtest_url) {
        var scores = document.createElement("a");
        scores.href = batch.backtest_url;
        scores.className = "backtest-link";
        scores.textContent = "Scores and chart";
        cell.appendChild(document.createTextNode(" "));
        cell.appendChild(scores);
      }
    } else {
      cell.textContent = "\u2014";
    }
  }

  function unfinished() {
    return Array.prototype.some.call(document.querySelectorAll("tr[data-batch-id] .status"), function (el) {
      return UNFINISHED[el.textContent.trim()];
    });
  }

  function poll() {
    if (!unfinished()) return;
    fetch("batches.json", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (body) {
          body.batches.forEach(function (batch) {
            var row = document.querySelector('tr[data-batch-id="' + batch.id + '"]');
            if (row) update(row, batch);
          });
        }
        window.setTimeout(poll, POLL_MS);
      })
      .catch(function () { window.setTimeout(poll, POLL_MS * 2); });
  }

  window.setTimeout(poll, POLL_MS);
})();
