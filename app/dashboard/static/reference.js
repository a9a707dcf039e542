// Renders the embedded OpenAPI document with the vendored ReDoc build (no network needed).
(function () {
  "use strict";
  var spec = JSON.parse(document.getElementById("openapi-document").textContent);
  Redoc.init(spec, { hideDownloadButton: false, disableSearch: false, expandResponses: "200,201" },
             document.getElementById("redoc-container"));
})();
