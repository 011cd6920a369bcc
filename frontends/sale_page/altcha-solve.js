// The proof-of-work for joining a queue with "challenge": true, solved by the ALTCHA widget
// (frontends/sale_page/vendor/altcha/, built from npm; no CDN). queue.js fetches the challenge with
// the user's token and hands it here; the widget solves it in its Web Workers and gives back
// the base64 solution the join sends as {"altcha": ...}. The widget is shown while it works,
// so the wait is visible (a few seconds on a phone when the queue is busy).

window.altchaSolve = (challenge) => new Promise((resolve, reject) => {
  const widget = document.createElement("altcha-widget");
  widget.setAttribute("challengejson", JSON.stringify(challenge));
  widget.setAttribute("hidefooter", "");
  widget.setAttribute("hidelogo", "");
  widget.addEventListener("statechange", (event) => {
    const { state, payload } = event.detail;
    if (state === "verified") {
      widget.remove();
      resolve(payload);
    } else if (state === "error" || state === "expired") {
      widget.remove();
      reject(new Error(`the challenge was not solved (${state})`));
    }
  });
  widget.addEventListener("load", () => widget.verify());
  (document.getElementById("challenge-slot") || document.body).append(widget);
});
