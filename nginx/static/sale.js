// The sale page: plain JS, no build step. Time comes from the server (GET /seckill/time,
// corrected for half the round trip), never from the browser's clock.
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
  unavailable: "The shop is very busy. Your order may have gone through: checking…",
  unknown_activity: "This sale does not exist.",
};

const page = { activity: null, token: null, offsetMs: 0, startsMs: null, endsMs: null,
               state: null, clicked: false, timer: null };

function readFragment() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  page.activity = params.get("activity") || page.activity;
  page.token = params.get("token") || page.token;
  $("activity-input").value = page.activity || "";
  $("token-input").value = page.token || "";
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (page.token) headers.Authorization = "Bearer " + page.token;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  let body = {};
  try { body = await response.json(); } catch (e) { body = { error: "unavailable" }; }
  return { status: response.status, body };
}

async function syncClock() {
  // Several samples; keep the one with the shortest round trip (the least skewed).
  let best = null;
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    const { status, body } = await api("/seckill/time");
    const t1 = Date.now();
    if (status !== 200) continue;
    const rtt = t1 - t0;
    const offset = body.now_ms + rtt / 2 - t1;
    if (best === null || rtt < best.rtt) best = { rtt, offset };
  }
  if (best !== null) {
    page.offsetMs = best.offset;
    $("offset").textContent = `${Math.round(best.offset)} ms (round trip ${best.rtt} ms)`;
  }
}

const serverNow = () => Date.now() + page.offsetMs;

async function loadActivity() {
  if (!page.activity) return;
  const { status, body } = await api(`/seckill/activities/${encodeURIComponent(page.activity)}`);
  if (status !== 200) {
    $("state").textContent = MESSAGES[body.error] || body.message || "unavailable";
    return;
  }
  $("name").textContent = body.name;
  $("activity-id").textContent = body.id;
  $("remaining").textContent = body.remaining === null ? "unlimited" : body.remaining;
  $("total").textContent = body.total === null ? "unlimited" : body.total;
  page.startsMs = Date.parse(body.starts_at);
  page.endsMs = Date.parse(body.ends_at);
  page.state = body.state;
  render();
}

function render() {
  if (page.startsMs === null) return;
  const now = serverNow();
  const button = $("buy");
  let state = page.state;
  if (now >= page.endsMs) state = "ended";
  else if (now >= page.startsMs && state === "upcoming") state = "open";
  $("state").textContent = state;
  if (now < page.startsMs) {
    const left = Math.max(0, page.startsMs - now);
    const s = Math.floor(left / 1000);
    const hh = String(Math.floor(s / 3600)).padStart(2, "0");
    const mm = String(Math.floor((s % 3600) / 60)).padStart(2, "0");
    const ss = String(s % 60).padStart(2, "0");
    $("countdown").textContent = `Starts in ${hh}:${mm}:${ss}.${Math.floor((left % 1000) / 100)}`;
  } else if (state === "open") {
    $("countdown").textContent = "The sale is open!";
  } else if (state === "sold_out") {
    $("countdown").textContent = "Sold out";
  } else {
    $("countdown").textContent = "The sale has ended";
  }
  button.disabled = page.clicked || state !== "open" || !page.token;
}

function showOutcome(text, kind) {
  const el = $("outcome");
  el.textContent = text;
  el.className = "outcome " + (kind || "");
}

async function pollOrder() {
  for (let i = 0; i < 60; i++) {
    const { status, body } = await api(`/seckill/${encodeURIComponent(page.activity)}/order`);
    if (status === 200) {
      $("order").textContent = body.order_id
        ? `Order ${body.order_id}: ${body.status}` : `Order status: ${body.status}`;
      if (body.status === "confirmed" || body.status === "cancelled" || body.status === "none") {
        return body.status;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  return "pending";
}

async function buy() {
  if (page.clicked) return;
  page.clicked = true;  // one click, one purchase: the button never re-enables
  render();
  showOutcome("Buying…");
  const url = await api(`/seckill/url?activity=${encodeURIComponent(page.activity)}`);
  if (url.status !== 200) {
    showOutcome(MESSAGES[url.body.error] || url.body.message || "Something went wrong.", "lost");
    if (url.body.error === "sold_out") { page.state = "sold_out"; render(); }
    return;
  }
  const result = await api(url.body.url, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
  });
  if (result.status === 200) {
    showOutcome(`You got it! Order ${result.body.order_id}.`, "won");
    pollOrder();
  } else if (result.body.error === "already_purchased") {
    showOutcome(`${MESSAGES.already_purchased} Order ${result.body.order_id}.`, "won");
    pollOrder();
  } else if (result.body.error === "unavailable") {
    showOutcome(MESSAGES.unavailable, "lost");
    const status = await pollOrder();
    if (status === "none") showOutcome("The shop was too busy; your order did not go through.", "lost");
  } else {
    showOutcome(MESSAGES[result.body.error] || result.body.message || "Something went wrong.", "lost");
    if (result.body.error === "sold_out") { page.state = "sold_out"; render(); }
  }
  loadActivity();
}

async function start() {
  readFragment();
  $("buy").addEventListener("click", buy);
  $("apply").addEventListener("click", () => {
    page.activity = $("activity-input").value.trim();
    page.token = $("token-input").value.trim();
    loadActivity();
  });
  window.addEventListener("hashchange", () => { readFragment(); loadActivity(); });
  await syncClock();
  await loadActivity();
  page.timer = setInterval(render, 100);
  setInterval(loadActivity, 2000);
}

start();
