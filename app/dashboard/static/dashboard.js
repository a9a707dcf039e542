// Small behaviours shared by every dashboard page. The pages work without it; it adds the copy button.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.copy");
    if (!button) return;
    var input = document.getElementById(button.getAttribute("data-copy-target"));
    var status = button.parentElement.querySelector(".copy-status");
    input.select();
    var done = function (ok) { if (status) status.textContent = ok ? "Copied." : "Select the key and copy it."; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(function () { done(true); }, function () { done(false); });
    } else {
      try { done(document.execCommand("copy")); } catch (e) { done(false); }
    }
  });
})();
