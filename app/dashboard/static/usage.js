// Draws the key page's hourly usage charts from the data embedded in the page.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("usage-data").textContent);
  [["day", 24], ["week", 168]].forEach(function (span) {
    var figure = document.getElementById("usage-" + span[0]);
    if (figure) window.dashboardCharts.usageChart(figure.querySelector(".chart-area"), data[span[0]], span[1]);
  });
})();
