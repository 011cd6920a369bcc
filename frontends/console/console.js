// The operator console: polls GET /admin/console/state every second with the operator token
// (kept in this tab's sessionStorage), draws answers per second with uPlot, and pulls the
// levers (POST /admin/activities/<id>/pause|resume|end). Each activity's card is made once
// and updated in place, so a focused button keeps its focus while the numbers move.
// It says only what is true: when the state cannot be read (the gateway does not answer, or
// it answers that Redis could not be read) the last known numbers stay, greyed, under "Data
// stale since <time>", never an empty list; nginx's own 502/504s (GET /metrics/nginx, counted
// from its access log, so they keep coming when no instance answers) are a series of their
// own; the refusals nginx repeated from its edge cache (the same endpoint's
// seckill_activity_outcomes_total{answered_by="nginx"}) are added to their activity's
// outcomes, so the rates are the crowd's and not the few answers that reached an instance;
// a failed lever says the operator's message.
// Signed in, it asks GET /admin/whoami who the token is, shows the name and role, and shows
// only the controls the role may use (a viewer gets no levers: the API refuses them anyway).
(function () {
  "use strict";
  var KEY = "seckill-operator-token";
  var POLL_MS = 1000;
  var WINDOW = 120; // points on the chart: two minutes
  var GROUPS = ["ok", "sold_out", "rate_limited", "paused", "other"];
  var NGINX = "nginx 502/504";
  var LINES = GROUPS.concat([NGINX]);
  var COLORS = { ok: "#166534", sold_out: "#991b1b", rate_limited: "#92400e", paused: "#6d28d9",
                 other: "#374151" };
  COLORS[NGINX] = "#dc2626";
  var DONE = { pause: "paused", resume: "resumed", end: "ended" };
  var RANK = { viewer: 0, operator: 1, admin: 2 }; // each role has the rights of the ones before
  var role = null; // the signed-in operator's role, from GET /admin/whoami
  var $ = function (id) { return document.getElementById(id); };
  var chart = null;
  var series = [[]].concat(LINES.map(function () { return []; }));
  var previous = null; // {t, all: {group: n}, per: {aid: {ok: n}}, withNginx}
  var nginxBefore = null; // {t, errors}
  // nginx's answers per activity, {aid: {outcome: n}}, as last read (null: never read). Kept
  // when a read fails: the counts only grow, and dropping them would make the next read's
  // whole total look like one second's answers.
  var nginxAnswers = null;
  var freshAt = null; // when the numbers shown were read (ms)
  var cards = {};
  var timer = null;
  var generation = 0;

  function token() { return sessionStorage.getItem(KEY); }

  function may(needed) { return role !== null && RANK[role] >= RANK[needed]; }

  function showLogin(message) {
    clearTimeout(timer);
    generation++;
    role = null;
    $("who").textContent = "";
    $("console").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("status").textContent = "Not connected";
    $("token").focus();
  }

  // {status, body}: body null when the answer is not JSON (nginx's or a proxy's page).
  function call(method, path) {
    return fetch(path, { method: method, headers: { Authorization: "Bearer " + token() },
                         cache: "no-store" })
      .then(function (response) {
        return response.json().catch(function () { return null; }).then(function (body) {
          return { status: response.status, body: body };
        });
      });
  }

  // The labels of one sample line, {name: value} (activity ids and outcomes need no escapes).
  function labels(text) {
    var found = {}; var pair; var each = /(\w+)="([^"]*)"/g;
    while ((pair = each.exec(text)) !== null) { found[pair[1]] = pair[2]; }
    return found;
  }

  // What nginx counted: its 502/504s (no instance answered; null when not in the answer) and
  // the answers it repeated from its edge cache, {aid: {outcome: n}}; null where no exporter
  // is served. Made-up ids are all under activity "", which no activity is.
  function nginxCounts() {
    return fetch("/metrics/nginx", { cache: "no-store" }).then(function (response) {
      if (response.status !== 200) { return null; }
      return response.text().then(function (text) {
        var found = /^seckill_nginx_upstream_errors_total (\S+)$/m.exec(text);
        var answers = {}; var line;
        var sample = /^seckill_activity_outcomes_total\{([^}]*)\} (\S+)$/gm;
        while ((line = sample.exec(text)) !== null) {
          var l = labels(line[1]);
          if (l.answered_by !== "nginx" || !l.activity) { continue; }
          var per = answers[l.activity] = answers[l.activity] || {};
          per[l.outcome] = (per[l.outcome] || 0) + Number(line[2]);
        }
        return { errors: found ? Number(found[1]) : null, answers: answers };
      });
    }).catch(function () { return null; });
  }

  // An activity's outcomes: the gateway's (its instances') and nginx's, added up.
  function outcomesOf(a) {
    var all = {};
    [a.outcomes || {}, (nginxAnswers && nginxAnswers[a.id]) || {}].forEach(function (some) {
      Object.keys(some).forEach(function (o) { all[o] = (all[o] || 0) + some[o]; });
    });
    return all;
  }

  function group(outcome) { return GROUPS.indexOf(outcome) >= 0 ? outcome : "other"; }

  function totals(activities) {
    var all = {}; var per = {};
    GROUPS.forEach(function (g) { all[g] = 0; });
    activities.forEach(function (a) {
      var outcomes = outcomesOf(a);
      per[a.id] = { ok: outcomes.ok || 0 };
      if (a.rehearsal === true) { return; }  // a drill's rehearsal: not in the shop's totals
      Object.keys(outcomes).forEach(function (outcome) {
        all[group(outcome)] += outcomes[outcome];
      });
    });
    return { all: all, per: per };
  }

  function clock(ms) { return new Date(ms).toLocaleTimeString(); }

  // One point a second: the gateway's rates (null, a gap, when they could not be read) and
  // nginx's 502/504 rate (null where it is not served).
  function drawChart(now, rates, nginxRate) {
    series[0].push(now / 1000);
    GROUPS.forEach(function (g, i) { series[i + 1].push(rates ? rates[g] : null); });
    series[LINES.length].push(nginxRate);
    if (series[0].length > WINDOW) { series.forEach(function (s) { s.shift(); }); }
    if (!chart) {
      var box = $("chart");
      chart = new uPlot({
        width: Math.max(280, box.clientWidth), height: 220,
        scales: { x: { time: true } },
        axes: [{ space: 90, values: function (u, ticks) {
          return ticks.map(function (t) { return clock(t * 1000); });
        } }, { label: "answers/s" }],
        series: [{}].concat(LINES.map(function (g) {
          return { label: g, stroke: COLORS[g], width: 2, points: { show: false },
                   dash: g === NGINX ? [6, 4] : undefined };
        })),
      }, series, box);
      window.addEventListener("resize", function () {
        chart.setSize({ width: Math.max(280, box.clientWidth), height: 220 });
      });
    } else {
      chart.setData(series);
    }
    var words = rates ? GROUPS.map(function (g) { return g + " " + rates[g].toFixed(1) + "/s"; })
      : ["gateway: no numbers"];
    if (nginxRate !== null) { words.push(NGINX + " " + nginxRate.toFixed(1) + "/s"); }
    $("rates").textContent = words.join(" · ");
  }

  // What a failed lever tells the operator: never a buyer's words (the gateway's 503
  // unavailable message is written for buyers: "check your order status").
  function failure(action, r) {
    var verb = { pause: "the pause", resume: "the resume", end: "the end" }[action];
    var body = r.body;
    if (!body || r.status === 502 || r.status === 504) {
      return "the gateway did not answer (" + r.status + "): " + verb
        + " may not have been applied; reload to see";
    }
    if (body.error === "unavailable") {
      return "Redis could not be reached" + (body.detail ? " (" + body.detail + ")" : "")
        + ": " + verb + " may not have been applied; the card shows the sale's state again"
        + " once Redis answers";
    }
    return body.message || body.error || "refused (" + r.status + ")";
  }

  function lever(aid, action, name) {
    if (action === "end" && !window.confirm("End the sale of " + name + " now? It cannot be reopened.")) {
      return;
    }
    call("POST", "/admin/activities/" + encodeURIComponent(aid) + "/" + action).then(function (r) {
      if (r.status === 401) { return showLogin("The token was refused."); }
      $("announce").textContent = r.status === 200 ? name + ": sale " + DONE[action] + "."
        : name + ": " + failure(action, r) + ".";
      poll(); // at once, then every second again
    }).catch(function () {
      $("announce").textContent = name + ": no answer from the gateway: the " + action
        + " may not have been applied; reload to see.";
    });
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
    var alarm = document.createElement("p");
    alarm.className = "alarm";
    alarm.hidden = true;
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
    if (may("operator")) { levers.append(pause, resume, end); } // a viewer's card: none
    li.append(h, alarm, bar, numbers, levers);
    return { li: li, title: title, badge: badge, alarm: alarm, bar: bar, fill: fill,
             numbers: numbers, pause: pause, resume: resume, end: end };
  }

  function update(c, a, okRate) {
    c.title.textContent = a.name + " (" + a.id + ")";
    c.badge.textContent = a.state.replace("_", " ") + (a.rehearsal === true ? " (rehearsal)" : "");
    c.badge.className = "badge " + a.state;
    // Set by the purchase script's check: every purchase is refused until repaired.
    c.alarm.hidden = a.inconsistent !== true;
    c.alarm.textContent = "counters inconsistent: run seckill reconcile --repair";
    var total = a.total; var left = a.remaining;
    var share = total ? Math.round(100 * left / total) : (total === 0 ? 0 : 100);
    c.fill.style.width = share + "%";
    c.bar.setAttribute("aria-valuemax", total === null ? "100" : String(total));
    c.bar.setAttribute("aria-valuenow", left === null ? "100" : String(left));
    c.bar.setAttribute("aria-label", total === null ? "Unlimited stock"
      : left + " of " + total + " left");
    c.numbers.textContent = (total === null ? "unlimited" : left + " of " + total + " left")
      + " · " + a.sold + " sold to " + a.buyers + " buyers"
      + (okRate === null ? "" : " · " + okRate.toFixed(1) + " ok/s")
      + " · orders pending " + a.orders.pending + (a.oldest_pending_s ? " (oldest "
      + a.oldest_pending_s.toFixed(1) + " s)" : "") + (a.holds ? " · holds " + a.holds : "")
      + (a.waiting ? " · queue " + a.waiting : "") + (a.dead_letters ? " · dead letters "
      + a.dead_letters : "");
    var ended = a.state === "ended";
    c.pause.disabled = ended || a.paused;
    c.resume.disabled = ended || !a.paused;
    c.end.disabled = ended;
    if (window.consoleVariants) { window.consoleVariants(c, a); } // variants.js: a bar each
  }

  function listItems(ul, items) { ul.replaceChildren.apply(ul, items); }

  function mark(ok, up, down) {
    var span = document.createElement("span");
    span.className = ok ? "up" : "down";
    span.textContent = ok ? up : down;
    return span;
  }

  // The numbers could not be read now: keep the last ones, greyed, and say since when.
  function showStale(since, why) {
    $("console").classList.add("stale");
    $("stale").hidden = false;
    $("stale").textContent = "Data stale since " + (since === null ? "the console opened"
      : clock(since)) + ": " + why + ". The numbers below are the last known.";
  }

  function render(state, now, nginxRate) {
    var stale = state.stale === true;
    var counted = totals(state.activities);
    var withNginx = nginxAnswers !== null;
    var rates = null; var perRate = {};
    // nginx's counts first read now: their whole total is not this second's (start afresh).
    if (!stale && previous && previous.withNginx === withNginx) {
      rates = {};
      var dt = Math.max(0.001, (state.now_ms - previous.t) / 1000);
      GROUPS.forEach(function (g) { rates[g] = Math.max(0, counted.all[g] - previous.all[g]) / dt; });
      Object.keys(counted.per).forEach(function (aid) {
        var before = previous.per[aid] ? previous.per[aid].ok : counted.per[aid].ok;
        perRate[aid] = Math.max(0, counted.per[aid].ok - before) / dt;
      });
    }
    if (!stale) {
      previous = { t: state.now_ms, all: counted.all, per: counted.per, withNginx: withNginx };
    }
    drawChart(now, rates || (stale ? null : zeros()), nginxRate);

    // A stale state with no numbers (this instance never read any): the page's own stay.
    if (!stale || state.activities.length) {
      var list = $("activities"); var seen = {};
      state.activities.forEach(function (a) {
        var c = cards[a.id];
        if (!c) { c = cards[a.id] = card(a); list.append(c.li); }
        update(c, a, stale ? null : perRate[a.id] || 0);
        seen[a.id] = true;
      });
      Object.keys(cards).forEach(function (aid) {
        if (!seen[aid]) { cards[aid].li.remove(); delete cards[aid]; }
      });
      var pending = 0; var oldest = 0; var dead = 0;
      state.activities.forEach(function (a) {
        pending += a.orders.pending; dead += a.dead_letters;
        oldest = Math.max(oldest, a.oldest_pending_s);
      });
      $("backlog").textContent = pending + " orders decided and not yet stored"
        + (pending ? "; the oldest for " + oldest.toFixed(1) + " s" : "") + ". Dead letters: "
        + dead + ".";
    }
    $("no-activities").hidden = stale || state.activities.length > 0;

    var nodes = state.redis_nodes || [{ address: "Redis", role: "server", ok: state.redis_up }];
    listItems($("redis"), nodes.map(function (n) {
      var li = document.createElement("li");
      li.append("Redis " + n.address + " (" + n.role + "): ", mark(n.ok, "up", "DOWN"),
                n.error ? " (" + n.error + ")" : "");
      return li;
    }));
    listItems($("instances"), state.instances.map(function (i) {
      var li = document.createElement("li");
      // An answer other than 200 is an instance alive but failing (its /healthz says what).
      var unhealthy = /^HTTP /.test(i.error || "");
      li.append(i.instance + ": ", mark(i.ok, "healthy", unhealthy ? "unhealthy" : "down"),
                i.error ? " (" + i.error + ")" : "");
      return li;
    }));
    // The store refuses writes for its disk: every purchase answers 503 storage until it has room.
    var storage = state.storage || { writable: true };
    $("storage").hidden = storage.writable;
    $("storage").textContent = storage.writable ? "" : "Purchases refused (503 storage): "
      + (storage.reason || "the store cannot write to its disk")
      + ". Sales resume by themselves once the disk has room.";
    if (stale) {
      showStale(state.stale_since === null ? freshAt : state.stale_since,
                "the gateway could not read Redis (" + (state.stale_reason || "no reason given") + ")");
      $("status").textContent = "Stale · " + clock(state.now_ms);
    } else {
      freshAt = state.now_ms;
      $("console").classList.remove("stale");
      $("stale").hidden = true;
      $("status").textContent = "Live · " + clock(state.now_ms);
    }
  }

  function zeros() {
    var none = {};
    GROUPS.forEach(function (g) { none[g] = 0; });
    return none;
  }

  // The state could not be had at all: the chart goes on with nginx's series alone.
  function unanswered(why, now, nginxRate) {
    drawChart(now, null, nginxRate);
    previous = null; // the next rates start afresh, not over the gap
    showStale(freshAt, why);
    $("status").textContent = "No numbers · " + clock(now);
  }

  function nginxRateAt(now, errors) {
    if (errors === null) { nginxBefore = null; return null; }
    var rate = 0;
    if (nginxBefore) {
      rate = Math.max(0, errors - nginxBefore.errors) / Math.max(0.001, (now - nginxBefore.t) / 1000);
    }
    nginxBefore = { t: now, errors: errors };
    return rate;
  }

  function poll() {
    // One loop only: a poll started by a lever supersedes the one in flight.
    var mine = ++generation;
    clearTimeout(timer);
    var asked = call("GET", "/admin/console/state").catch(function () { return null; });
    return Promise.all([asked, nginxCounts()]).then(function (got) {
      if (mine !== generation) { return; }
      var r = got[0];
      var now = Date.now();
      var nginxRate = nginxRateAt(now, got[1] && got[1].errors);
      if (got[1]) { nginxAnswers = got[1].answers; }
      if (r && r.status === 401) {
        sessionStorage.removeItem(KEY);
        return showLogin("The token was refused.");
      }
      if (r === null) { unanswered("no answer from the gateway", now, nginxRate); }
      else if (r.status !== 200 || !r.body) {
        unanswered("the gateway did not answer (" + r.status + ")", now, nginxRate);
      } else { render(r.body, now, nginxRate); }
      timer = setTimeout(poll, POLL_MS);
    });
  }

  // Who the token is: then the console, with the controls of that role.
  function signedIn(who) {
    role = RANK[who.role] === undefined ? "viewer" : who.role;
    document.body.dataset.role = role;
    $("who").textContent = "Signed in as " + who.name + " (" + role + ")"
      + (may("operator") ? "" : " · reads only");
    Object.keys(cards).forEach(function (aid) { cards[aid].li.remove(); delete cards[aid]; });
    poll();
  }

  function start() {
    $("login").hidden = true;
    $("console").hidden = false;
    var mine = ++generation;
    clearTimeout(timer);
    call("GET", "/admin/whoami").then(function (r) {
      if (mine !== generation) { return; }
      if (r.status === 401) {
        sessionStorage.removeItem(KEY);
        return showLogin("The token was refused.");
      }
      if (r.status !== 200 || !r.body) { throw new Error("HTTP " + r.status); }
      signedIn(r.body);
    }).catch(function (error) {
      if (mine !== generation) { return; }
      $("status").textContent = "Could not check the token (" + error.message
        + "); trying again";
      timer = setTimeout(start, POLL_MS);
    });
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
