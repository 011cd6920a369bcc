// The operator console: polls GET /admin/console/state every second with the operator token
// (kept in this tab's sessionStorage), draws answers per second with uPlot, and pulls the
// levers (POST /admin/activities/<id>/pause|resume|end). Each activity's card is made once
// and updated in place, so a focused button keeps its focus while the numbers move.
(function () {
  "use strict";
  var KEY = "seckill-operator-token";
  var POLL_MS = 1000;
  var WINDOW = 120; // points on the chart: two minutes
  var GROUPS = ["ok", "sold_out", "rate_limited", "paused", "other"];
  var COLORS = { ok: "#166534", sold_out: "#991b1b", rate_limited: "#92400e", paused: "#6d28d9",
                 other: "#374151" };
  var $ = function (id) { return document.getElementById(id); };
  var chart = null;
  var series = [[]].concat(GROUPS.map(function () { return []; }));
  var previous = null; // {t, totals: {group: n}, per: {aid: {ok: n}}}
  var cards = {};
  var timer = null;
  var generation = 0;

  function token() { return sessionStorage.getItem(KEY); }

  function showLogin(message) {
    clearTimeout(timer);
    generation++;
    $("console").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("status").textContent = "Not connected";
    $("token").focus();
  }

  function call(method, path) {
    return fetch(path, { method: method, headers: { Authorization: "Bearer " + token() },
                         cache: "no-store" })
      .then(function (response) {
        return response.json().then(function (body) { return { status: response.status, body: body }; });
      });
  }

  function group(outcome) { return GROUPS.indexOf(outcome) >= 0 ? outcome : "other"; }

  function totals(activities) {
    var all = {}; var per = {};
    GROUPS.forEach(function (g) { all[g] = 0; });
    activities.forEach(function (a) {
      per[a.id] = { ok: (a.outcomes && a.outcomes.ok) || 0 };
      Object.keys(a.outcomes || {}).forEach(function (outcome) {
        all[group(outcome)] += a.outcomes[outcome];
      });
    });
    return { all: all, per: per };
  }

  function drawChart(now, rates) {
    series[0].push(now / 1000);
    GROUPS.forEach(function (g, i) { series[i + 1].push(rates[g]); });
    if (series[0].length > WINDOW) { series.forEach(function (s) { s.shift(); }); }
    if (!chart) {
      var box = $("chart");
      chart = new uPlot({
        width: Math.max(280, box.clientWidth), height: 220,
        scales: { x: { time: true } },
        axes: [{ space: 90, values: function (u, ticks) {
          return ticks.map(function (t) { return new Date(t * 1000).toLocaleTimeString(); });
        } }, { label: "answers/s" }],
        series: [{}].concat(GROUPS.map(function (g) {
          return { label: g, stroke: COLORS[g], width: 2, points: { show: false } };
        })),
      }, series, box);
      window.addEventListener("resize", function () {
        chart.setSize({ width: Math.max(280, box.clientWidth), height: 220 });
      });
    } else {
      chart.setData(series);
    }
    $("rates").textContent = GROUPS.map(function (g) {
      return g + " " + rates[g].toFixed(1) + "/s";
    }).join(" · ");
  }

  function lever(aid, action, name) {
    if (action === "end" && !window.confirm("End the sale of " + name + " now? It cannot be reopened.")) {
      return;
    }
    call("POST", "/admin/activities/" + encodeURIComponent(aid) + "/" + action).then(function (r) {
      if (r.status === 401) { return showLogin("The token was refused."); }
      var done = { pause: "paused", resume: "resumed", end: "ended" }[action];
      $("announce").textContent = r.status === 200 ? name + ": sale " + done + "."
        : name + ": " + (r.body.message || r.body.error || "refused") + ".";
      poll(); // at once, then every second again
    }).catch(function () { $("announce").textContent = name + ": no answer; try again."; });
  }

  function button(text, action, aid, name, danger) {
    var b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.dataset.action = action;
    if (danger) { b.className = "danger"; }
    b.addEventListener("click", function () { lever(aid, action, name()); });
    return b;
  }

  function card(a) {
    var li = document.createElement("li");
    li.className = "activity";
    li.dataset.activity = a.id;
    var h = document.createElement("h3");
    var title = document.createElement("span");
    var badge = document.createElement("span");
    h.append(title, badge);
    var bar = document.createElement("div");
    bar.className = "bar";
    bar.setAttribute("role", "progressbar");
    bar.setAttribute("aria-valuemin", "0");
    var fill = document.createElement("span");
    bar.append(fill);
    var numbers = document.createElement("p");
    numbers.className = "numbers";
    var levers = document.createElement("div");
    levers.className = "levers";
    var name = function () { return title.textContent; };
    var pause = button("Pause", "pause", a.id, name);
    var resume = button("Resume", "resume", a.id, name);
    var end = button("End now", "end", a.id, name, true);
    levers.append(pause, resume, end);
    li.append(h, bar, numbers, levers);
    return { li: li, title: title, badge: badge, bar: bar, fill: fill, numbers: numbers,
             pause: pause, resume: resume, end: end };
  }

  function update(c, a, okRate) {
    c.title.textContent = a.name + " (" + a.id + ")";
    c.badge.textContent = a.state.replace("_", " ");
    c.badge.className = "badge " + a.state;
    var total = a.total; var left = a.remaining;
    var share = total ? Math.round(100 * left / total) : (total === 0 ? 0 : 100);
    c.fill.style.width = share + "%";
    c.bar.setAttribute("aria-valuemax", total === null ? "100" : String(total));
    c.bar.setAttribute("aria-valuenow", left === null ? "100" : String(left));
    c.bar.setAttribute("aria-label", total === null ? "Unlimited stock"
      : left + " of " + total + " left");
    c.numbers.textContent = (total === null ? "unlimited" : left + " of " + total + " left")
      + " · " + a.sold + " sold to " + a.buyers + " buyers · " + okRate.toFixed(1) + " ok/s"
      + " · orders pending " + a.orders.pending + (a.oldest_pending_s ? " (oldest "
      + a.oldest_pending_s.toFixed(1) + " s)" : "") + (a.holds ? " · holds " + a.holds : "")
      + (a.waiting ? " · queue " + a.waiting : "") + (a.dead_letters ? " · dead letters "
      + a.dead_letters : "");
    var ended = a.state === "ended";
    c.pause.disabled = ended || a.paused;
    c.resume.disabled = ended || !a.paused;
    c.end.disabled = ended;
  }

  function render(state) {
    var now = state.now_ms;
    var counted = totals(state.activities);
    var rates = {}; var perRate = {};
    GROUPS.forEach(function (g) { rates[g] = 0; });
    if (previous) {
      var dt = Math.max(0.001, (now - previous.t) / 1000);
      GROUPS.forEach(function (g) { rates[g] = Math.max(0, counted.all[g] - previous.all[g]) / dt; });
      Object.keys(counted.per).forEach(function (aid) {
        var before = previous.per[aid] ? previous.per[aid].ok : counted.per[aid].ok;
        perRate[aid] = Math.max(0, counted.per[aid].ok - before) / dt;
      });
    }
    previous = { t: now, all: counted.all, per: counted.per };
    drawChart(now, rates);

    var pending = 0; var oldest = 0; var dead = 0;
    var list = $("activities"); var seen = {};
    state.activities.forEach(function (a) {
      pending += a.orders.pending; dead += a.dead_letters;
      oldest = Math.max(oldest, a.oldest_pending_s);
      var c = cards[a.id];
      if (!c) { c = cards[a.id] = card(a); list.append(c.li); }
      update(c, a, perRate[a.id] || 0);
      seen[a.id] = true;
    });
    Object.keys(cards).forEach(function (aid) {
      if (!seen[aid]) { cards[aid].li.remove(); delete cards[aid]; }
    });
    $("no-activities").hidden = state.activities.length > 0;
    $("backlog").textContent = pending + " orders decided and not yet stored"
      + (pending ? "; the oldest for " + oldest.toFixed(1) + " s" : "") + ". Dead letters: "
      + dead + ". Redis: " + (state.redis_up ? "up" : "DOWN") + ".";

    var ul = $("instances");
    ul.replaceChildren.apply(ul, state.instances.map(function (i) {
      var li = document.createElement("li");
      var mark = document.createElement("span");
      mark.className = i.ok ? "up" : "down";
      mark.textContent = i.ok ? "healthy" : "down";
      li.append(i.instance + ": ", mark, i.error ? " (" + i.error + ")" : "");
      return li;
    }));
    $("status").textContent = "Live · " + new Date(now).toLocaleTimeString();
  }

  function poll() {
    // One loop only: a poll started by a lever supersedes the one in flight.
    var mine = ++generation;
    clearTimeout(timer);
    return call("GET", "/admin/console/state").then(function (r) {
      if (mine !== generation) { return; }
      if (r.status === 401) { sessionStorage.removeItem(KEY); return showLogin("The token was refused."); }
      if (r.status !== 200) { $("status").textContent = "The gateway answered " + r.status; }
      else { render(r.body); }
      timer = setTimeout(poll, POLL_MS);
    }).catch(function () {
      if (mine !== generation) { return; }
      $("status").textContent = "No answer from the gateway; retrying";
      timer = setTimeout(poll, POLL_MS);
    });
  }

  function start() {
    $("login").hidden = true;
    $("console").hidden = false;
    poll();
  }

  $("login").addEventListener("submit", function (event) {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("token").value);
    $("token").value = "";
    start();
  });
  $("signout").addEventListener("click", function () {
    sessionStorage.removeItem(KEY);
    showLogin("");
  });
  if (token()) { start(); } else { showLogin(""); }
})();
