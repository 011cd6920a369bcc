// The console's "Blocked buyers" panel: GET /admin/blocks (the first 200, in the order they
// were made) every two seconds while the console is open, with the operator token the console
// keeps in this tab's sessionStorage. Who (an account, or a person and so every account of
// theirs), where (one activity, or every one), why and since when. Text only, never HTML: a
// reason is the operator's words, shown as written. When the list cannot be read the last one
// read stays, and the panel says so.
(function () {
  "use strict";
  var KEY = "seckill-operator-token";
  var POLL_MS = 2000;
  var PAGE = 200;
  var $ = function (id) { return document.getElementById(id); };

  function cell(row, text) {
    var td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
  }

  function render(blocks, more) {
    var body = $("blocks").tBodies[0];
    var rows = blocks.map(function (b) {
      var tr = document.createElement("tr");
      tr.dataset.block = (b.user !== undefined ? "user:" + b.user : "person:" + b.person)
        + "@" + (b.activity || "");
      cell(tr, b.user !== undefined ? "account " + b.user
        : "person " + b.person + " (every account)");
      cell(tr, b.activity ? b.activity : "every activity");
      cell(tr, b.reason || "—");
      cell(tr, new Date(b.created_at).toLocaleString());
      return tr;
    });
    body.replaceChildren.apply(body, rows);
    $("blocks").hidden = blocks.length === 0;
    $("no-blocks").hidden = blocks.length !== 0;
    $("h-blocks").textContent = "Blocked buyers (" + blocks.length + (more ? "+" : "") + ")";
    $("blocks-note").textContent = more
      ? "The first " + PAGE + " blocks; `seckill blocks` lists them all." : "";
  }

  function poll() {
    var token = sessionStorage.getItem(KEY);
    if (!token || $("console").hidden) { return setTimeout(poll, POLL_MS); }
    fetch("/admin/blocks?limit=" + PAGE, { headers: { Authorization: "Bearer " + token },
                                           cache: "no-store" })
      .then(function (response) {
        if (response.status !== 200) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (body) { render(body.blocks, body.next !== undefined); })
      .catch(function (error) {
        $("blocks-note").textContent = "The blocks could not be read (" + error.message
          + "); the list is the last one read.";
      })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  poll();
})();
