// The live count of pending requests: polls the API (same origin, no inline script: CSP).
"use strict";
(function () {
  var base = document.body.getAttribute("data-base") || "";
  var badge = document.getElementById("pending-count");
  if (!badge) { return; }
  var list = document.getElementById("pending");
  var shown = list ? parseInt(list.getAttribute("data-count"), 10) : null;
  var notice = document.getElementById("live-notice");
  function refresh() {
    fetch(base + "/api/approvals/count", {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        badge.textContent = String(data.pending);
        badge.setAttribute("data-pending", String(data.pending));
        if (notice && shown !== null && data.pending !== shown) { notice.hidden = false; }
      })
      .catch(function () { /* the next poll tries again */ });
  }
  refresh();
  setInterval(refresh, 2000);
})();
