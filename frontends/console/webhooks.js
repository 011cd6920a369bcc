// The console's "Webhooks" panel: GET /admin/webhooks (the first 200 endpoints, each with its
// summary) every two seconds while the console is open, with the operator token the console
// keeps in this tab's sessionStorage. Per endpoint: where the events go and which, the last
// attempt (when, and the answer's code or the error), the deliveries given up (failed) and
// those still to send (backlog, and how old the oldest is). Text only, never HTML: a URL is
// shown as written. When the list cannot be read the last one read stays, and the panel says so.
(function () {
  "use strict";
  var KEY = "seckill-operator-token";
  var POLL_MS = 2000;
  var PAGE = 200;
  var $ = function (id) { return document.getElementById(id); };

  function cell(row, text, className) {
    var td = document.createElement("td");
    td.textContent = text;
    if (className) { td.className = className; }
    row.appendChild(td);
  }

  function ago(iso) {
    var seconds = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
    if (seconds < 120) { return seconds + " s"; }
    if (seconds < 7200) { return Math.round(seconds / 60) + " min"; }
    return Math.round(seconds / 3600) + " h";
  }

  function lastAttempt(last) {
    if (!last) { return "none yet"; }
    var answer = last.code !== null ? "HTTP " + last.code : (last.error || "no answer");
    return new Date(last.at).toLocaleTimeString() + " · " + answer;
  }

  function render(hooks, more) {
    var body = $("webhooks").tBodies[0];
    var rows = hooks.map(function (h) {
      var s = h.summary;
      var tr = document.createElement("tr");
      tr.dataset.webhook = h.id;
      cell(tr, h.url);
      cell(tr, h.events.join(", ") === "*" ? "every event" : h.events.join(", "));
      var last = s.last_attempt;
      var good = last && last.code !== null && last.code >= 200 && last.code < 300;
      cell(tr, lastAttempt(last), last && !good ? "down" : "");
      cell(tr, String(s.failed), s.failed > 0 ? "down" : "");
      cell(tr, String(s.backlog) + (s.oldest_pending_at ? " (oldest " + ago(s.oldest_pending_at)
        + ")" : ""));
      return tr;
    });
    body.replaceChildren.apply(body, rows);
    $("webhooks").hidden = hooks.length === 0;
    $("no-webhooks").hidden = hooks.length !== 0;
    $("h-webhooks").textContent = "Webhooks (" + hooks.length + (more ? "+" : "") + ")";
    $("webhooks-note").textContent = more
      ? "The first " + PAGE + " endpoints; `seckill webhooks list` lists them all." : "";
  }

  function poll() {
    var token = sessionStorage.getItem(KEY);
    if (!token || $("console").hidden) { return setTimeout(poll, POLL_MS); }
    fetch("/admin/webhooks?limit=" + PAGE, { headers: { Authorization: "Bearer " + token },
                                             cache: "no-store" })
      .then(function (response) {
        if (response.status !== 200) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (body) { render(body.webhooks, body.next !== undefined); })
      .catch(function (error) {
        $("webhooks-note").textContent = "The webhooks could not be read (" + error.message
          + "); the list is the last one read.";
      })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  poll();
})();
