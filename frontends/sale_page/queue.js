// The sale page's queue and draw: activities whose view has "admission": "queue" or "draw".
// Loaded before sale.js; it uses sale.js's globals (page, api, serverNow, render, showOutcome,
// lost, pollOrder, retryLater, MESSAGES) only when called, never at load time. A first_come
// activity never reaches this code: every entry point checks queued() first.
//
// The user joins (POST /seckill/<aid>/queue), then polls their status (GET, same path) after
// the poll_after_ms the last answer gave: never sooner, one request at a time, so a crowd
// polls at the rate the gateway asks for. Once admitted, the status carries the purchase URL.
"use strict";

// Refusals of a join that the sale page's own MESSAGES do not cover.
const QUEUE_MESSAGES = {
  not_open: "The queue is not open yet.",
  entries_closed: "The draw has taken place; it takes no more entries.",
  challenge_failed: "The anti-bot check did not pass (or it expired). Please try again.",
  not_admitted: "It is not your turn yet: wait in the queue.",
};

// Where this user stands, as the last queue status said, and the polling's own state.
const queue = {
  gen: 0,              // bumped when the page switches activity: older answers are dropped
  started: false,      // the first status of this activity has been asked for
  status: null,        // none waiting admitted not_drawn sold_out ended purchased; null: unknown
  position: null,      // users ahead plus one (absent before the start: drawn then)
  firstPosition: null, // the first position seen since joining: where the progress bar starts
  eta: null,           // seconds, when the gateway can tell
  lapsed: false,       // status none: an earlier turn ran out unused
  url: null, expiresMs: null,  // admitted: the purchase URL and when it lapses (server ms)
  pollAfterMs: 1000, answeredAt: null,  // the gateway's pace, and its last answer (perf ms)
  inFlight: false, joining: false, timer: null, failures: 0,
  counter: null, counterInFlight: false,  // the public GET .../queue/state's last answer
};

const queued = () => page.admission === "queue" || page.admission === "draw";
const isDraw = () => page.admission === "draw";
const queuePath = (suffix = "") => `/seckill/${encodeURIComponent(page.activity)}/queue${suffix}`;

// ---------------------------------------------------------------------------------------------
// HOOK: the proof-of-work challenge of a "challenge": true activity. To be wired to the
// vendored ALTCHA widget (frontends/sale_page/vendor/altcha/).
//
//   solveChallenge(aid) -> Promise<string | null>
//
// Resolves to the base64 ALTCHA solution, which the join sends as {"altcha": solution}, or to
// null when there is none (the join then sends {} and the gateway's 403 challenge_failed is
// said in words). It never rejects. For now it fetches GET /seckill/<aid>/challenge
// ({algorithm, challenge, maxnumber, salt, signature}) and, when the page defines
// window.altchaSolve(challenge) -> Promise<string> | string, returns what that gives.
// ---------------------------------------------------------------------------------------------
async function solveChallenge(aid) {
  const issued = await api(`/seckill/${encodeURIComponent(aid)}/challenge`, { auth: true });
  if (issued.status !== 200 || typeof window.altchaSolve !== "function") return null;
  try {
    const solution = await window.altchaSolve(issued.body);
    return typeof solution === "string" && solution !== "" ? solution : null;
  } catch (e) {
    return null;  // a failed solve is a join without a solution: the gateway says why
  }
}

// Forget everything about the previous activity (another one was chosen).
function queueReset() {
  clearTimeout(queue.timer);
  Object.assign(queue, {
    gen: queue.gen + 1, started: false, status: null, position: null, firstPosition: null,
    eta: null, lapsed: false, url: null, expiresMs: null, pollAfterMs: 1000, answeredAt: null,
    inFlight: false, joining: false, timer: null, failures: 0, counter: null,
    counterInFlight: false,
  });
}

// Called after each load of the activity: the first time, ask where this user stands (they may
// have joined before a reload) and read the public counter.
function queueLoaded() {
  if (!queued() || queue.started) return;
  queue.started = true;
  fetchQueueState();
  if (page.token) pollQueue();
}

// One request to the user's queue path; null if the page moved to another activity meanwhile.
async function queueRequest(method, body) {
  const gen = queue.gen;
  queue.inFlight = true;
  try {
    const options = { auth: true, method };
    if (body !== undefined) {
      options.headers = { "Content-Type": "application/json" };
      options.body = body;
    }
    const answer = await api(queuePath(), options);
    return gen === queue.gen ? answer : null;
  } finally {
    if (gen === queue.gen) {
      queue.inFlight = false;
      queue.answeredAt = performance.now();
    }
  }
}

// Statuses after which the place can still change: keep asking.
function keepPolling() {
  const s = queue.status;
  return s === "waiting" || s === "admitted" || s === "not_drawn" ||
    (s === "sold_out" && queue.position !== null);  // a kept place: units may come back
}

// The next poll, after `ms` plus up to 10 % of jitter (so that a crowd told the same pause
// does not come back in the same instant), and never sooner than the gateway's last pause
// after its last answer.
function schedulePoll(ms) {
  clearTimeout(queue.timer);
  const earliest = queue.answeredAt === null ? 0
    : queue.answeredAt + queue.pollAfterMs - performance.now();
  const wait = Math.max(ms, earliest) * (1 + 0.1 * Math.random());
  queue.timer = setTimeout(pollQueue, wait);
}

// As soon as the pace allows: something happened (a purchase, a turn that ran out).
const pollSoon = () => schedulePoll(0);

async function pollQueue() {
  if (!queued() || !page.token) return;
  if (queue.inFlight) {  // never two at once: try again when the gateway's pause is over
    schedulePoll(queue.pollAfterMs);
    return;
  }
  const answer = await queueRequest("GET");
  if (answer === null) return;
  if (answer.status === 200) {
    queue.failures = 0;
    applyStatus(answer.body);
    return;
  }
  if (answer.status === 401 || answer.status === 404) {
    lost(answer);  // a bad token or an unknown sale: asking again will not help
    return;
  }
  // Busy (429, 5xx, no answer): back off, doubling, at most 30 s; Retry-After when given.
  queue.failures += 1;
  const told = 1000 * (Number(answer.headers.get("Retry-After")) || 0);
  schedulePoll(Math.max(told, Math.min(30000, queue.pollAfterMs * 2 ** queue.failures)));
}

// Take in a status body (of a poll or a join).
function applyStatus(body) {
  if (body.status !== queue.status) fetchQueueState();  // the counter follows a change at once
  queue.status = body.status;
  queue.position = typeof body.position === "number" ? body.position : null;
  queue.eta = typeof body.eta_seconds === "number" ? body.eta_seconds : null;
  queue.lapsed = body.lapsed === true;
  queue.pollAfterMs = Math.max(250, Number(body.poll_after_ms) || 1000);
  const admitted = body.status === "admitted" && typeof body.url === "string";
  queue.url = admitted ? body.url : null;
  queue.expiresMs = admitted ? 1000 * body.expires_at : null;
  if (body.status === "none") queue.firstPosition = null;  // a new join starts over
  if (queue.position !== null && (body.status === "waiting" || body.status === "not_drawn")) {
    queue.firstPosition = Math.max(queue.firstPosition || 0, queue.position);
  }
  if (body.status === "purchased" && !page.done) {  // bought earlier, or in another tab
    page.done = true;
    showOutcome(`${MESSAGES.already_purchased} Order ${body.order_id}.`, "won");
    pollOrder();
  }
  clearTimeout(queue.timer);
  if (keepPolling()) schedulePoll(queue.pollAfterMs);
  render();
}

// The join button: solve the challenge if there is one, then join.
async function joinQueue() {
  if (!mayJoin(serverNow())) return;  // one join per click, never beside a poll
  queue.joining = true;
  render();
  try {
    let body = {};
    if (page.challenge) {
      showOutcome("Checking that you are not a bot…");
      const solution = await solveChallenge(page.activity);
      if (solution !== null) body = { altcha: solution };
    }
    showOutcome(isDraw() ? "Entering the draw…" : "Joining the queue…");
    const answer = await queueRequest("POST", JSON.stringify(body));
    if (answer === null) return;
    if (answer.status === 200) {
      showOutcome("");
      queue.firstPosition = null;
      applyStatus(answer.body);
    } else {
      joinRefused(answer);
    }
  } finally {
    queue.joining = false;
    render();
  }
}

// A join that did not go through, said in words.
function joinRefused(answer) {
  const error = answer.body.error;
  if (error === "already_purchased") {
    applyStatus({ status: "purchased", order_id: answer.body.order_id, poll_after_ms: 1000 });
  } else if (answer.status === 0 || answer.status >= 500) {
    // Joining again is harmless (it keeps the place), so the button simply comes back.
    showOutcome("The shop is very busy. Please try again in a moment.", "lost");
    retryLater(1);
  } else if (QUEUE_MESSAGES[error]) {
    showOutcome(QUEUE_MESSAGES[error], "lost");
    if (error === "not_open" && answer.body.queue_opens_at) {
      page.queueOpensMs = Date.parse(answer.body.queue_opens_at);
    }
  } else {
    lost(answer);  // sold out, ended, rate limited, signed out...: as for a purchase
  }
}

// The purchase URL of an admission, shaped like the answer of GET /seckill/url (sale.js buys
// through it).
function queuePurchaseUrl() {
  if (queue.url !== null && queue.expiresMs > serverNow()) {
    return { status: 200, body: { url: queue.url }, headers: new Headers() };
  }
  return { status: 403, body: { error: "not_admitted", message: QUEUE_MESSAGES.not_admitted },
           headers: new Headers() };
}

// The public counter, cached by nginx for a second; the page asks every 2 s and when the
// user's status changes, one request at a time.
async function fetchQueueState() {
  if (!queued() || !page.activity || queue.counterInFlight) return;
  const gen = queue.gen;
  queue.counterInFlight = true;
  const { status, body } = await api(queuePath("/state"));
  if (gen !== queue.gen) return;
  queue.counterInFlight = false;
  queue.counter = status === 200 ? body : null;
}

function mayJoin(now) {
  return queued() && !!page.token && !page.done && !queue.joining && !queue.inFlight &&
    queue.status === "none" && now >= page.queueOpensMs && now < page.endsMs &&
    !(isDraw() && now >= page.startsMs) &&
    !(page.retryAtMs !== null && performance.now() < page.retryAtMs);
}

function mayBuyFromQueue(now) {
  return queue.status === "admitted" && queue.url !== null && queue.expiresMs > now;
}

// ---- Rendering (every 100 ms from sale.js's render; the DOM only changes when text does) ----

function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text;
}

function hms(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600);
  const mmss = `${two(Math.floor((s % 3600) / 60))}:${two(s % 60)}`;
  return h > 0 ? `${two(h)}:${mmss}` : mmss;
}

function utc(ms) {
  return new Date(ms).toISOString().slice(11, 19) + " UTC";
}

function about(seconds) {
  if (seconds < 60) return `about ${Math.max(1, seconds)} s`;
  if (seconds < 3600) return `about ${Math.round(seconds / 60)} min`;
  return `about ${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

// The status line (the aria-live region: it changes only when the status does).
function statusText(now) {
  const noun = isDraw() ? "draw" : "queue";
  switch (queue.status) {
    case null:
      return page.token ? "" : `Enter a user token under Demo settings to join the ${noun}.`;
    case "none":
      if (queue.lapsed) {
        return isDraw() ? "Your turn passed before you bought."
          : "Your turn passed before you bought. Join again to queue at the back.";
      }
      if (now < page.queueOpensMs) return `The ${noun} is not open yet.`;
      if (isDraw() && now >= page.startsMs) return QUEUE_MESSAGES.entries_closed;
      if (now < page.startsMs) {
        return isDraw() ? "The draw is open: enter before the sale starts."
          : "The queue is open. Everyone who joins before the start gets a random place.";
      }
      return "Join the queue to get your turn to buy.";
    case "waiting":
      if (queue.position === null) {
        return isDraw() ? "You are entered. The draw takes place at the start."
          : "You are in the queue. The order is drawn at the start.";
      }
      return "You are in the queue.";
    case "admitted": return "Your turn! Buy now.";
    case "not_drawn": return "You were not drawn.";
    case "sold_out": return `Sold out: the ${noun} has closed.`;
    case "ended": return MESSAGES.ended;
    case "purchased": return "You have bought in this sale.";
    default: return "";
  }
}

// The line under it: the place, the wait, the time left to buy.
function detailText(now) {
  const eta = queue.eta === null ? "" : ` · ${about(queue.eta)} to go`;
  switch (queue.status) {
    case "none":
      return now < page.queueOpensMs
        ? `The ${isDraw() ? "draw" : "queue"} opens in ${hms(page.queueOpensMs - now)}.` : "";
    case "waiting":
      if (queue.position === null) return "Your place shows when the sale starts.";
      return `You are number ${queue.position} in the queue${eta}.`;
    case "admitted":
      return queue.expiresMs > now
        ? `Your turn ends at ${utc(queue.expiresMs)}: ${hms(queue.expiresMs - now)} left to buy.`
        : "Your time to buy ran out.";
    case "not_drawn":
      return `You are number ${queue.position} on the waiting list${eta}. If a winner does ` +
        "not buy in time, the next on the list gets a turn.";
    case "sold_out":
      return queue.position === null ? ""
        : `If units come back, you keep your place (number ${queue.position}).`;
    default:
      return "";
  }
}

// How far the user has come from their first seen position to the front (admitted: all).
function renderProgress() {
  const bar = $("queue-progress");
  const moving = queue.position !== null &&
    (queue.status === "waiting" || queue.status === "not_drawn");
  const show = moving || queue.status === "admitted";
  $("queue-progress-wrap").hidden = !show;
  if (!show) return;
  let percent = 100;
  let words = "your turn";
  if (moving) {
    const first = Math.max(queue.firstPosition || queue.position, queue.position);
    percent = Math.round(100 * (first - queue.position) / first);
    words = `number ${queue.position}; ${first - queue.position} of ${first} places moved`;
  }
  if (bar.getAttribute("aria-valuetext") !== words) {
    bar.setAttribute("aria-valuenow", String(percent));
    bar.setAttribute("aria-valuetext", words);
    $("queue-progress-bar").style.width = `${percent}%`;
  }
}

function counterText() {
  const c = queue.counter;
  if (c === null) return "";
  const left = c.remaining === null ? "unlimited" : `${c.remaining} left`;
  return `Right now: ${c.waiting} waiting · ${c.admitted} buying · ${left}`;
}

function renderQueue(now) {
  $("queue").hidden = !queued();
  if (!queued()) return;  // first come: sale.js shows the button while the sale is open
  setText("queue-title", isDraw() ? "Draw" : "Queue");
  setText("queue-status", statusText(now));
  setText("queue-detail", detailText(now));
  setText("queue-counter", counterText());
  renderProgress();
  const join = $("join");
  const offered = page.token && !page.done &&
    (queue.status === "none" || queue.status === null) && now < page.endsMs &&
    !(isDraw() && now >= page.startsMs);
  join.hidden = !offered;
  join.disabled = !mayJoin(now);
  setText("join", isDraw() ? "Enter the draw" : "Join the queue");
  // The buy button belongs to a turn: shown while admitted (or while buying), not before.
  $("buy").hidden = !(queue.status === "admitted" || page.busy);
  const title = queue.status === "admitted" ? "Your turn! · Flash sale" : "Flash sale";
  if (document.title !== title) document.title = title;
}
