// The sale page: plain JS, no build step. Time comes from the server (GET /seckill/time,
// corrected for half the round trip) and then runs on the browser's monotonic clock
// (performance.now), so neither a wrong nor a changing browser clock moves the countdown.
// A queue or draw activity's join, polls and turn are in queue.js (loaded first); what the
// page says when the shop does not answer (a purchase's unknown outcome) is in outcome.js; an
// activity's variants (the picker, the chosen one's purchase) are in variants.js.
// What the page shows never goes back in time: the activity's view may come from nginx's
// one-second cache, so an answer older than what the page already knows is not shown
// (learn() below). Developer settings (the token field, the clock) only with ?debug=1.
"use strict";

const $ = (id) => document.getElementById(id);
const MESSAGES = {
  sold_out: "Sold out. Better luck next time.",
  already_purchased: "You already bought this one.",
  rate_limited: "Too many requests, please wait a moment and try again.",
  not_started: "The sale has not started yet.",
  ended: "The sale has ended.",
  insufficient_stock: "Not enough stock left for that quantity.",
  unauthenticated: "Please sign in again (your token is missing or expired).",
  bad_signature: "This purchase link expired; please try again.",
  unknown_activity: "This sale does not exist.",
  bad_request: "The shop did not understand that request.",
  hold_expired: "Your earlier order here was not paid in time; you cannot buy again in this sale.",
  paused: "The shop paused the sale for a moment. This page carries on by itself when it resumes.",
  blocked: "The shop has refused purchases from this account. If you think this is a mistake, " +
    "please contact the shop.",
  verification_required: "This sale needs a verified account: one purchase per person, not " +
    "per account. Verify your account with the shop, then come back.",
};
// What to do next, after each outcome.
const NEXT = {
  won: "Nothing more to do: the shop stores your order and confirms it below.",
  won_pay: "Pay before the time below runs out, or the order is cancelled and the item goes back on sale.",
  sold_out: "Every unit has been sold. Units sometimes come back (a cancelled or unpaid order): this page shows it if they do.",
  ended: "This sale has ended.",
};
const RANK = { upcoming: 0, open: 1, sold_out: 2, ended: 3 };
// An answer that says less than the page knows (an earlier state, more units left) is shown
// only once the page's knowledge is this old: cached answers are never that old, so such an
// answer then means units really came back.
const STALE_MS = 5000;
const DEBUG = new URLSearchParams(window.location.search).get("debug") === "1";
const EXPIRED = "Your payment window ran out: the order was cancelled and its units went " +
  "back on sale.";
// Answers after which the purchase may or may not have happened: ask for the order.
const UNSURE = "The shop is very busy. Your order may have gone through: checking…";

const page = {
  activity: null, token: null, offsetMs: null, startsMs: null, endsMs: null,
  state: null, busy: false, done: false, retryAtMs: null,
  remaining: null, total: null, learntAt: 0, paused: false, pausedAt: 0, outcomeKind: null,
  payBy: null, payment: null,  // a payment window's order: its deadline (server ms) and state
  admission: null, queueOpensMs: null, challenge: false,  // queue and draw: queue.js
  unsure: false, unreachable: false,  // outcome.js: an unknown outcome, a shop out of reach
};

function readFragment() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  page.activity = params.get("activity") || page.activity;
  page.token = params.get("token") || page.token;
  $("activity-input").value = page.activity || "";
  $("token-input").value = page.token || "";
}

// Every answer is JSON, nginx's included; a network failure is status 0.
async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (options.auth && page.token) headers.Authorization = "Bearer " + page.token;
  let response;
  try {
    response = await fetch(path, { method: options.method || "GET", headers,
                                   body: options.body, cache: "no-store" });
  } catch (e) {
    return { status: 0, body: { error: "network" }, headers: new Headers() };
  }
  let body = {};
  try { body = await response.json(); } catch (e) { body = { error: "unreadable" }; }
  return { status: response.status, body, headers: response.headers };
}

async function syncClock() {
  // Several samples; keep the one with the shortest round trip (the least skewed).
  let best = null;
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    const { status, body } = await api("/seckill/time");
    const t1 = performance.now();
    if (status !== 200 || typeof body.now_ms !== "number") continue;
    const rtt = t1 - t0;
    // The server read its clock about half a round trip before the answer arrived.
    const offset = body.now_ms + rtt / 2 - t1;
    if (best === null || rtt < best.rtt) best = { rtt, offset };
  }
  if (best !== null) {
    page.offsetMs = best.offset;
    const skew = serverNow() - Date.now();
    const size = Math.abs(skew) < 1000
      ? `${Math.round(Math.abs(skew))} ms` : `${(Math.abs(skew) / 1000).toFixed(1)} s`;
    $("offset").textContent = `your clock is ${size} ${skew >= 0 ? "behind" : "ahead"}; ` +
      `the countdown follows the shop's (round trip ${Math.round(best.rtt)} ms)`;
  } else {
    $("offset").textContent = "could not reach the shop's clock";
  }
}

const serverNow = () => performance.now() + page.offsetMs;

// Take in what an answer says of the sale (its state and units left) unless it is older than
// what the page knows; returns whether it was taken.
function learn(state, remaining) {
  const now = performance.now();
  if (page.state !== null) {
    const back = RANK[state] < RANK[page.state] || (RANK[state] === RANK[page.state] &&
      remaining !== null && page.remaining !== null && remaining > page.remaining);
    if (page.state === "ended" && state !== "ended") return false;  // an end is final
    if (back && now - page.learntAt < STALE_MS) return false;
    if (!back && state === page.state && remaining === page.remaining) return true;
  }
  page.state = state;
  page.remaining = remaining;
  page.learntAt = now;
  return true;
}

// A pause is learnt from the view or from a refused purchase; like the state, a cached view
// saying "not paused" does not undo a pause seen less than STALE_MS ago.
function notePaused(paused) {
  const now = performance.now();
  if (paused) {
    page.paused = true;
    page.pausedAt = now;
  } else if (!page.paused || now - page.pausedAt >= STALE_MS) {
    page.paused = false;
  }
}

function money(price) {
  try {
    const format = new Intl.NumberFormat(undefined, { style: "currency", currency: price.currency });
    const digits = format.resolvedOptions().maximumFractionDigits;
    return format.format(price.amount / 10 ** digits);
  } catch (e) {
    return `${(price.amount / 100).toFixed(2)} ${price.currency}`;
  }
}

function showProduct(body) {
  $("name").textContent = body.name;
  $("activity-id").textContent = body.id;
  const image = $("image");
  if (body.image_url) {
    if (image.getAttribute("src") !== body.image_url) image.src = body.image_url;
    image.alt = body.name;
  }
  image.hidden = !body.image_url;
  $("price").textContent = body.price ? money(body.price) : "";
  $("price").hidden = !body.price;
  $("description").textContent = body.description || "";
  $("description").hidden = !body.description;
}

async function loadActivity() {
  if (!page.activity) {
    $("state").textContent = "no sale chosen";
    $("countdown").textContent = DEBUG ? "Choose a sale under Demo settings." : "This sale could not be found.";
    if (DEBUG) $("setup").open = true;
    return;
  }
  const { status, body } = await api(`/seckill/activities/${encodeURIComponent(page.activity)}`);
  if (status !== 200) {
    if (status === 0 || status >= 500 || body.error === "unreadable") {
      page.unreachable = true;  // said by render() until the sale is known
      render();
      return;
    }
    $("state").textContent = MESSAGES[body.error] || body.message || "unavailable";
    return;
  }
  page.unreachable = false;
  showProduct(body);
  page.total = body.total;
  notePaused(body.paused === true);
  learn(body.state, body.remaining);
  variantsLoaded(body);
  $("remaining").textContent = page.remaining === null ? "unlimited" : page.remaining;
  $("total").textContent = body.total === null ? "unlimited" : body.total;
  page.startsMs = Date.parse(body.starts_at);
  page.endsMs = Date.parse(body.ends_at);
  page.admission = body.admission || "first_come";
  page.queueOpensMs = body.queue_opens_at ? Date.parse(body.queue_opens_at) : null;
  page.challenge = body.challenge === true;
  render();
  queueLoaded();
}

function two(n) { return String(n).padStart(2, "0"); }

function render() {
  if (page.startsMs === null || page.offsetMs === null || page.state === null) {
    if (page.unreachable) showUnreachable();
    return;
  }
  $("stock-line").hidden = false;
  const now = serverNow();
  let state = page.state;
  if (now >= page.endsMs) state = "ended";
  else if (now >= page.startsMs && state === "upcoming") state = "open";
  else if (queued() && state === "upcoming" && now >= page.queueOpensMs) state = "queue_open";
  // A waiter's status says sold out the moment the queue closes, before the activity's view.
  if (queued() && queue.status === "sold_out" && state !== "ended") state = "sold_out";
  const left = page.remaining === null ? "unlimited" : String(page.remaining);
  if ($("remaining").textContent !== left) $("remaining").textContent = left;
  const paused = page.paused && state !== "ended";
  const shown = paused ? "paused" : state;
  $("state").textContent = shown.replace("_", " ");
  $("state").className = "state " + shown;
  if (!paused && page.outcomeKind === "paused") showOutcome("");  // resumed: said below
  if (page.outcomeKind === "won") {
    $("countdown").textContent = "Your order is in";
  } else if (paused) {
    $("countdown").textContent = "The sale is paused";
  } else if (now < page.startsMs) {
    const left = page.startsMs - now;
    const s = Math.floor(left / 1000);
    $("countdown").textContent = `Starts in ${two(Math.floor(s / 3600))}:` +
      `${two(Math.floor((s % 3600) / 60))}:${two(s % 60)}.${Math.floor((left % 1000) / 100)}`;
  } else if (state === "open") {
    $("countdown").textContent = "The sale is open!";
  } else if (state === "sold_out") {
    $("countdown").textContent = "Sold out";
  } else {
    $("countdown").textContent = "The sale has ended";
  }
  renderPayment(now);
  const waiting = page.retryAtMs !== null && performance.now() < page.retryAtMs;
  $("buy").disabled = page.busy || page.done || waiting || state !== "open" || !page.token ||
    paused || (queued() && !mayBuyFromQueue(now)) ||  // a queue's buyers buy in their turn only
    !variantReady();  // with variants, once one that has units is chosen
  // No dead button: sold out, ended or paused, the page says so instead.
  const closed = paused || state === "sold_out" || state === "ended";
  $("buy").hidden = closed && !page.busy;
  const label = page.unsure && !page.done ? "Try again" : "Buy now";
  if ($("buy").textContent !== label) $("buy").textContent = label;
  if (page.outcomeKind !== "won") {
    // Said once: the outcome already says a purchase met the pause.
    $("next").textContent = paused && page.outcomeKind !== "paused" ? MESSAGES.paused
      : closed && !paused ? NEXT[state] : "";
  }
  $("hint").textContent = page.token || queued() || closed ? variantHint(closed)
    : DEBUG ? "Enter a user token under Demo settings to buy." : "Sign in to the shop to buy.";
  renderQueue(now);
  renderVariants(state);
}

function showOutcome(text, kind) {
  const el = $("outcome");
  el.textContent = text;
  el.className = "outcome " + (kind || "");
  page.outcomeKind = kind || null;
}

function retryLater(seconds) {
  page.retryAtMs = performance.now() + 1000 * Math.max(1, seconds || 1);
}

function lost(answer) {
  if (variantRefused(answer)) return;  // that variant is gone: the buyer chooses another
  const error = answer.body.error;
  showOutcome(MESSAGES[error] || answer.body.message || "Something went wrong.",
              error === "paused" ? "paused" : "lost");
  if (error === "blocked" || error === "verification_required") {
    page.done = true;  // asking again would be refused again
  } else if (error === "sold_out" || error === "ended" || error === "hold_expired") {
    page.done = true;
    if (error !== "hold_expired") learn(error, error === "sold_out" ? 0 : page.remaining);
    $("outcome").focus();
  } else if (error === "paused") {
    notePaused(true);
    retryLater(Number(answer.headers.get("Retry-After")) || answer.body.retry_after);
  } else if (error === "rate_limited") {
    retryLater(Number(answer.headers.get("Retry-After")) || answer.body.retry_after);
  } else if (error === "not_started" && typeof answer.body.now_ms === "number") {
    page.offsetMs = answer.body.now_ms - performance.now();  // our clock was early
  } else if (error === "unauthenticated" && DEBUG) {
    $("setup").open = true;
  }
}

async function buy() {
  if (page.busy || page.done) return;  // one purchase per click, never two in flight
  page.busy = true;
  render();
  try {
    showOutcome("Buying…");
    const aid = encodeURIComponent(page.activity);
    // A queue's turn carries its purchase URL; first come asks for one.
    const url = queued() ? queuePurchaseUrl()
      : await api(`/seckill/url?activity=${aid}`, { auth: true });
    if (url.body.error === "paused") {  // nothing was bought: the sale is paused
      lost(url);
      return;
    }
    if (url.body.error === "already_purchased") {
      await alreadyBought(url.body);
      return;
    }
    if (url.status === 0 || url.status >= 500) {
      // No purchase was made yet (this only asks for the signed URL).
      showOutcome("The shop is very busy. Please try again in a moment.", "lost");
      retryLater(1);
      return;
    }
    if (url.status !== 200) {
      lost(url);
      return;
    }
    page.unsure = false;
    // variants.js: "?variant=<vid>", or nothing for a single item; no body either way.
    const result = await api(url.body.url + purchaseQuery(), { method: "POST", auth: true });
    if (result.status === 200 && result.body.order_id) {
      won(result.body.order_id, result.body.pay_by, result.body.items);
    } else if (result.body.error === "already_purchased") {
      await alreadyBought(result.body);
    } else if (refusedBeforeDeciding(result)) {
      notSold();  // a 503 whose detail says nothing was decided (outcome.js)
    } else if (unknownOutcome(result)) {
      await unsure();  // 502/504, a 503 after deciding, no answer: ask the order status
    } else {
      lost(result);  // a definite refusal, a paused 503 included
    }
  } finally {
    page.busy = false;
    render();
    loadActivity();
    if (queued()) pollSoon();  // the queue says what the purchase changed (bought, turn over)
  }
}

async function start() {
  $("debug").hidden = !DEBUG;
  readFragment();
  $("buy").addEventListener("click", buy);
  $("join").addEventListener("click", joinQueue);
  $("apply").addEventListener("click", () => {
    page.activity = $("activity-input").value.trim();
    page.token = $("token-input").value.trim();
    page.done = false;
    page.state = page.startsMs = page.endsMs = page.payBy = page.payment = null;
    page.remaining = null;
    page.learntAt = 0;
    page.paused = false;
    page.admission = page.queueOpensMs = null;
    queueReset();
    showOutcome("");
    $("order").textContent = "";
    loadActivity().then(checkExistingOrder);
  });
  window.addEventListener("hashchange", () => { queueReset(); readFragment(); loadActivity(); });
  await reachShop();  // outcome.js: until the shop's clock answers, saying so meanwhile
  await loadActivity();
  await checkExistingOrder();
  setInterval(render, 100);
  setInterval(loadActivity, 2000);
  setInterval(fetchQueueState, 2000);  // queue.js: only for a queue or draw
}

start();
