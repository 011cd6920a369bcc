// Loaded before sale.js; it uses sale.js's globals (page, api, showOutcome, ...) when called.
// A purchase's outcome: the order, its payment window, and what the page says when the shop
// does not answer:
// - a purchase answered 502/503/504, a body that is not JSON, or no answer at all (a network
//   error, a timeout) has an UNKNOWN outcome: the shop may have sold the unit and lost the
//   answer. The page asks the order status (a few tries, backing off) before it says anything
//   else; buying again is always safe (one purchase per user: a repeat answers
//   already_purchased with the same order id);
// - a 503 paused, or a 503 unavailable whose detail says it was refused before anything was
//   decided (no_replica, inconsistent, expired, held, storage), is a definite "not sold";
// - after a 502/504 from nginx, an order status of "none" is final: the gateway decides no
//   purchase past its deadline, which ends before nginx gives up on it;
// - a page that cannot reach the shop at all says so and keeps trying, rather than "loading…".
"use strict";

const CHECKING = "The shop did not answer clearly. Your order may have gone through: checking…";
const UNKNOWN = "We do not know yet whether your order went through: the shop did not answer. " +
  "Trying again is safe: if it did go through, you get the same order, never a second one.";
const NOT_THROUGH = "Your order did not go through (the shop was too busy). Please try again.";
const NOT_SOLD = "Nothing was sold: the shop could not take orders just now. Please try again " +
  "in a few seconds.";
const UNREACHABLE = "Cannot reach the shop right now";
const UNREACHABLE_NEXT = "This page keeps trying by itself. Nothing was bought.";
// 503 unavailable details that say the purchase was refused before anything was decided.
const REFUSED_DETAILS = ["no_replica", "inconsistent", "expired", "held", "storage"];
// Waits before each ask of the order status after an unknown outcome (about 7.5 s in all).
const ORDER_WAITS_MS = [0, 500, 1000, 2000, 4000];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Whether an answer to a purchase leaves its outcome unknown.
function unknownOutcome(answer) {
  if (answer.status === 0 || answer.body.error === "unreadable") return true;
  if (answer.status < 500) return false;
  return !(answer.body.error === "paused" || refusedBeforeDeciding(answer));
}

function refusedBeforeDeciding(answer) {
  return answer.status === 503 && answer.body.error === "unavailable" &&
    REFUSED_DETAILS.includes(answer.body.detail);
}

// The order status, asked until it answers (bounded); null when it never did.
async function askOrder() {
  for (const wait of ORDER_WAITS_MS) {
    if (wait) await sleep(wait);
    const { status, body } = await api(
      `/seckill/${encodeURIComponent(page.activity)}/order`, { auth: true, timeoutMs: 5000 });
    if (status === 200 && typeof body.status === "string") return body;
  }
  return null;
}

// The purchase's outcome is unknown: the order status says whether it went through.
async function unsure() {
  showOutcome(CHECKING, "checking");
  const order = await askOrder();
  if (order === null) {
    page.unsure = true;  // the button offers to try again: safe either way
    showOutcome(UNKNOWN, "unknown");
    retryLater(1);
  } else if (order.status === "pending" || order.status === "confirmed") {
    await won(order.order_id, order.pay_by, order.items);  // pending: decided, being stored
  } else if (order.status === "none") {
    showOutcome(NOT_THROUGH, "lost");
    retryLater(1);
  } else {  // cancelled (an expired hold, or the operator): no second purchase here
    page.done = true;
    showOrder(order);
    notePayment(order);
    if (order.payment !== "expired") showOutcome(`Your order ${order.order_id} was cancelled.`, "lost");
  }
}

// Refused before anything was decided: not sold, and soon worth another try.
function notSold() {
  showOutcome(NOT_SOLD, "lost");
  retryLater(2);
}

// Nothing known of the sale yet and the shop does not answer: say so, not "loading…".
function showUnreachable() {
  $("state").textContent = "no connection";
  $("state").className = "state offline";
  $("stock-line").hidden = true;  // "– left of –" says nothing
  $("countdown").textContent = UNREACHABLE;
  $("next").textContent = UNREACHABLE_NEXT;
  $("buy").hidden = true;
}

// The shop's clock, asked until it answers (backing off to 8 s); the page says meanwhile.
async function reachShop() {
  for (let wait = 1000; ; wait = Math.min(2 * wait, 8000)) {
    await syncClock();
    if (page.offsetMs !== null) return;
    page.unreachable = true;
    showUnreachable();
    await sleep(wait);
  }
}

// With a payment window: "pay by" and the time left, on the server's clock.
function renderPayment(now) {
  const el = $("payment");
  if (page.payment === "paid") {
    el.textContent = "Paid. Thank you!";
  } else if (page.payment === "due" && page.payBy !== null) {
    const left = Math.max(0, page.payBy - now);
    const s = Math.ceil(left / 1000);
    const at = new Date(page.payBy).toISOString().slice(11, 19);
    el.textContent = `Pay by ${at} UTC: ${two(Math.floor(s / 60))}:${two(s % 60)} left`;
  } else {
    el.textContent = "";
  }
}

function notePayment(body) {
  if (typeof body.pay_by === "number") page.payBy = body.pay_by;
  if (body.payment) page.payment = body.payment;
  if (body.payment === "expired") showOutcome(EXPIRED, "lost");
}

function showOrder(body) {
  const payment = body.payment ? `, payment ${body.payment}` : "";
  const items = describeItems(body.items);  // variants.js: "" for a single item
  const what = items ? ` (${items})` : "";
  $("order").textContent = body.order_id
    ? `Order ${body.order_id}${what}: ${body.status}${payment}` : `Order status: ${body.status}`;
}

// Until the order is final (confirmed or cancelled, and with a payment window paid or
// expired) or known not to exist; bounded (a minute, or until just past pay_by).
async function pollOrder() {
  const started = performance.now();
  for (let i = 0; i < 100000; i++) {
    const { status, body } = await api(
      `/seckill/${encodeURIComponent(page.activity)}/order`, { auth: true });
    if (status === 200) {
      if (body.status !== "none") showOrder(body);
      notePayment(body);
      if (body.status !== "pending" && body.payment !== "due") return body;
    }
    const limit = Math.max(60000, page.payBy === null ? 0 : page.payBy - serverNow() + 10000);
    if (performance.now() - started > limit) break;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  return { status: "pending" };
}

// A user who already bought sees it on arrival, and gets no buy button.
async function checkExistingOrder() {
  if (!page.activity || !page.token) return;
  const { status, body } = await api(
    `/seckill/${encodeURIComponent(page.activity)}/order`, { auth: true });
  if (status === 200 && (body.status === "pending" || body.status === "confirmed")) {
    page.done = true;
    showOutcome(`${MESSAGES.already_purchased} Order ${body.order_id}.`, "won");
    showOrder(body);
    notePayment(body);
    render();
    if (body.status === "pending" || body.payment === "due") pollOrder();
  } else if (status === 200 && body.payment === "expired") {
    page.done = true;  // no second purchase after an expired hold
    showOrder(body);
    notePayment(body);
    render();
  } else if (status === 403 && body.error === "verification_required") {
    lost({ status, body, headers: new Headers() });  // said now, not after a click
    render();
  }
}

async function won(order, payBy, items) {
  page.done = true;
  page.unsure = false;
  const what = describeItems(items);  // variants.js: "" for a single item
  showOutcome(`You got it! Order ${order}${what ? ": " + what : ""}.`, "won");
  $("next").textContent = typeof payBy === "number" ? NEXT.won_pay : NEXT.won;
  showOrder({ order_id: order, status: "pending", items });
  if (typeof payBy === "number") notePayment({ pay_by: payBy, payment: "due" });
  $("outcome").focus();  // the button is gone: the answer is where the reader goes next
  await pollOrder();
}

// Bought before (this click's earlier try, whose answer was lost, or another tab).
async function alreadyBought(body) {
  page.done = true;
  page.unsure = false;
  if (!body.order_id) {
    await checkExistingOrder();  // the edge's refusal names no order: the status does
    return;
  }
  showOutcome(`${MESSAGES.already_purchased} Order ${body.order_id}.`, "won");
  pollOrder();
}
