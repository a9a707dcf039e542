// Charts each monitor's recent points: the value, the expected band, and anomalies as red dots.
(function () {
  "use strict";
  var charts = JSON.parse(document.getElementById("monitor-data").textContent);
  charts.forEach(function (chart) {
    var figure = document.querySelector('figure[data-monitor-id="' + chart.id + '"] .chart-area');
    if (figure && chart.series.timestamps.length) window.dashboardCharts.monitorChart(figure, chart.series);
  });
})();
