// Live regions: an element with data-live-url is re-rendered from that URL every
// data-live-interval ms, only when the HTML changed, until the fragment says data-live-final.
"use strict";
(function () {
  function poll(region) {
    var url = region.getAttribute("data-live-url");
    var interval = parseInt(region.getAttribute("data-live-interval") || "2000", 10);
    var last = region.innerHTML;
    var timer = null;

    function done() { return region.querySelector("[data-live-final]") !== null; }

    // Someone is filling in a form inside the region (the abort confirmation): re-rendering
    // would wipe what they typed, so wait until they are done.
    function busy() {
      var active = document.activeElement;
      return region.querySelector("details[open]") !== null ||
        (active !== null && region.contains(active) && active.matches("input, textarea, select"));
    }

    function tick() {
      if (done()) { return; }
      if (document.hidden || busy()) { timer = window.setTimeout(tick, interval); return; }
      fetch(url, { headers: { "X-Proxima-Fetch": "1" }, credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (response.status === 401) { window.location.reload(); return null; }
          return response.ok ? response.text() : null;
        })
        .then(function (html) {
          if (html !== null && html !== undefined && html !== last) {
            region.innerHTML = html;
            last = region.innerHTML;
          }
        }, function () { /* offline for a moment: the next tick tries again */ })
        .then(function () { timer = window.setTimeout(tick, interval); });
    }

    timer = window.setTimeout(tick, interval);
    return timer;
  }

  document.querySelectorAll("[data-live-url]").forEach(poll);
})();
