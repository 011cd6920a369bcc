// The console's bar per variant: on the card of an activity with variants (sizes,
// colours, seat categories), one small bar for each, filled by its units sold out of its own
// total (full: that variant is gone), under the card's own bar of the whole stock left. Fed by
// the same GET /admin/console/state as the card (each row's "variants": id, name, total,
// remaining, sold): console.js calls window.consoleVariants(card, activity) after each update,
// so the bars move with the card's numbers and go grey with them when the state is stale.
// Made once per card and updated in place; text only, never HTML (a name is the operator's).
(function () {
  "use strict";

  function part(tag, className) {
    var el = document.createElement(tag);
    el.className = className;
    return el;
  }

  function setText(el, text) { if (el.textContent !== text) { el.textContent = text; } }

  function setAttr(el, name, value) {
    if (el.getAttribute(name) !== value) { el.setAttribute(name, value); }
  }

  function row(v) {
    var li = part("li", "variant-row");
    li.dataset.variant = v.id;
    var label = part("span", "variant-label");
    var count = part("span", "variant-count");
    var bar = part("div", "bar variant-bar");
    bar.setAttribute("role", "progressbar");
    bar.setAttribute("aria-valuemin", "0");
    bar.append(document.createElement("span"));
    li.append(label, count, bar);
    return li;
  }

  function update(li, v) {
    var left = Math.max(0, v.remaining);
    var sold = typeof v.sold === "number" ? v.sold : v.total - left;
    var share = v.total ? Math.min(100, Math.round(100 * sold / v.total)) : 0;
    setText(li.children[0], v.name + " (" + v.id + ")");
    setText(li.children[1], sold + " of " + v.total + " sold · "
      + (left ? left + " left" : "gone"));
    li.classList.toggle("gone", left === 0);
    var bar = li.children[2];
    setAttr(bar, "aria-valuemax", String(v.total));
    setAttr(bar, "aria-valuenow", String(sold));
    setAttr(bar, "aria-label",
            v.name + ": " + sold + " of " + v.total + " sold, " + left + " left");
    bar.firstChild.style.width = share + "%";
  }

  // `card`: console.js's card of the activity (li, the levers' buttons...); `a`: its state row.
  window.consoleVariants = function (card, a) {
    var list = Array.isArray(a.variants) ? a.variants : [];
    var box = card.li.querySelector(".variant-bars");
    if (!list.length) {
      if (box) { box.remove(); }
      return;
    }
    var ids = list.map(function (v) { return v.id; }).join(",");
    if (!box || box.dataset.ids !== ids) {
      if (box) { box.remove(); }
      box = part("ul", "variant-bars");
      box.dataset.ids = ids;
      box.setAttribute("aria-label", "Variants");
      box.append.apply(box, list.map(row));
      card.li.insertBefore(box, card.pause.parentNode); // above the levers
    }
    list.forEach(function (v, i) { update(box.children[i], v); });
  };
})();
