// The sale page's variants (sizes, colours, seat categories: an activity whose view has
// "variants"). Loaded before sale.js; it uses sale.js's globals (page, $, showOutcome,
// STALE_MS) only when called. A single-item activity never shows the picker and buys with
// no terms, as before: every entry point checks hasVariants() first.
//
// The picker offers every variant with its units left; one with none is shown as gone and
// cannot be chosen. The purchase names the chosen one (?variant=<vid>). A variant that sold
// out between the look and the click (409 variant_sold_out) is said in words, shown gone and
// unchosen, and the buyer picks another; like the activity's own state (sale.js's learn()),
// what that refusal said outranks a view up to STALE_MS older than it, since the view may come
// from nginx's one-second cache.
"use strict";

const variants = {
  list: [],      // the view's [{id, name, total, remaining, state}], in the operator's order
  chosen: null,  // the id the buyer picked (null: none yet, or it went)
  told: {},      // id -> {remaining, at}: what a refused purchase said of it (performance ms)
  built: "",     // the ids the picker's options were made for
  activity: null,  // whose variants these are
};

const hasVariants = () => variants.list.length > 0;
const variantOf = (vid) => variants.list.find((v) => v.id === vid) || null;
const variantName = (vid) => (variantOf(vid) || { name: vid }).name;

// Units left of a variant: the view's, unless a refusal less than STALE_MS ago said fewer.
function unitsLeft(v) {
  const told = variants.told[v.id];
  if (told && performance.now() - told.at < STALE_MS) return Math.min(told.remaining, v.remaining);
  return v.remaining;
}

const gone = (v) => v.state === "sold_out" || unitsLeft(v) <= 0;

// After each load of the activity: its variants (none: a single-item activity).
function variantsLoaded(body) {
  if (variants.activity !== body.id) {  // another activity was chosen: start afresh
    Object.assign(variants, { activity: body.id, chosen: null, told: {} });
  }
  variants.list = Array.isArray(body.variants) ? body.variants : [];
}

// What the purchase URL asks for, in its query: the chosen variant, or nothing for a single
// item. The terms could go in a JSON body ({"variant": vid}) as well; a request without a
// body costs the gateway less (docs/performance.md), in the sale's busiest second.
function purchaseQuery() {
  return hasVariants() ? `?variant=${encodeURIComponent(variants.chosen)}` : "";
}

// Whether the buy button may be offered: a variant that still has units is chosen.
function variantReady() {
  if (!hasVariants()) return true;
  const v = variantOf(variants.chosen);
  return v !== null && !gone(v);
}

// The hint under the button while nothing is chosen ("" otherwise).
function variantHint(closed) {
  return hasVariants() && !closed && !page.done && !variantReady() ? "Choose one above to buy."
    : "";
}

// "EU 41", "2 × EU 41, EU 42": what an order's items are, by the variants' names.
function describeItems(items) {
  if (!Array.isArray(items) || items.length === 0) return "";
  return items.map((i) => (i.quantity > 1 ? `${i.quantity} × ` : "") + variantName(i.variant))
    .join(", ");
}

function choose(vid) {
  variants.chosen = vid;
  if (page.outcomeKind === "variant-lost") showOutcome("");  // the refusal was about another one
  render();
}

// One option of the picker: a radio button in its label, named "<name>, <n> left" or
// "<name>, gone" (aria-label: the name and the count read as one).
function makeOption(v) {
  const label = document.createElement("label");
  label.className = "variant";
  label.dataset.variant = v.id;
  const input = document.createElement("input");
  input.type = "radio";
  input.name = "variant";
  input.value = v.id;
  input.addEventListener("change", () => { if (input.checked) choose(v.id); });
  const name = document.createElement("span");
  name.className = "variant-name";
  const left = document.createElement("span");
  left.className = "variant-left";
  label.append(input, name, left);
  return label;
}

function setVariantText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// Every 100 ms from sale.js's render (the DOM only changes when something does). `state` is
// the sale's as the page shows it: sold out or ended, nothing can be chosen.
function renderVariants(state) {
  const box = $("variants");
  box.hidden = !hasVariants() || state === "ended";
  if (box.hidden) return;
  const ids = variants.list.map((v) => v.id).join(",");
  const options = $("variant-options");
  if (variants.built !== ids) {
    options.replaceChildren(...variants.list.map(makeOption));
    variants.built = ids;
  }
  const closed = state === "sold_out" || state === "ended";
  if (variants.chosen !== null && !page.done && !variantReady()) variants.chosen = null;
  variants.list.forEach((v, i) => {
    const label = options.children[i];
    const input = label.firstChild;
    const out = closed || gone(v);
    const left = out ? "gone" : `${unitsLeft(v)} left`;
    setVariantText(label.children[1], v.name);
    setVariantText(label.children[2], left);
    const name = `${v.name}, ${left}`;
    if (input.getAttribute("aria-label") !== name) input.setAttribute("aria-label", name);
    const disabled = out || page.done || page.busy;
    if (input.disabled !== disabled) input.disabled = disabled;
    const checked = variants.chosen === v.id;
    if (input.checked !== checked) input.checked = checked;
    const kind = "variant" + (out ? " gone" : "") + (checked ? " chosen" : "");
    if (label.className !== kind) label.className = kind;
  });
}

// A purchase refused for its variant (409 variant_sold_out, 404 unknown_variant): said in
// words, the variant shown gone and unchosen, the first one left focused; returns whether the
// answer was such a refusal. The caller's refresh of the activity brings the other counts.
function variantRefused(answer) {
  const error = answer.body.error;
  if (!hasVariants() || (error !== "variant_sold_out" && error !== "unknown_variant")) {
    return false;
  }
  const vid = typeof answer.body.variant === "string" ? answer.body.variant : variants.chosen;
  const left = error === "variant_sold_out" && typeof answer.body.remaining === "number"
    ? answer.body.remaining : 0;
  variants.told[vid] = { remaining: left, at: performance.now() };
  const name = variantName(vid);
  const text = error === "unknown_variant"
    ? `${name} is not on sale here any more. Please choose another.`
    : left > 0 ? `Only ${left} of ${name} left. Please choose again.`
      : `${name} has just sold out. Please choose another.`;
  showOutcome(text, "variant-lost");
  if (variants.chosen === vid) variants.chosen = null;
  renderVariants(page.state);
  const next = $("variant-options").querySelector("input:not(:disabled)");
  if (next) next.focus();
  return true;
}
