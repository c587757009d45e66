// The onboarding checklist: polls the cluster's status JSON and turns each check green, or shows
// its likely causes and fixes while it is pending. Stops once all three passed.
"use strict";
(function () {
  var list = document.getElementById("checklist");
  if (!list) { return; }
  var url = list.getAttribute("data-status-url");
  var summary = document.getElementById("checks-summary");
  var doneBanner = document.getElementById("onboarding-done");
  var nodes = document.getElementById("node-agents");
  var warnings = document.getElementById("warnings");
  var INTERVAL = 1000;

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = text; }
    if (className) { node.className = className; }
    return node;
  }

  function renderCauses(item, check) {
    var box = item.querySelector(".check-causes");
    var body = box.querySelector("tbody");
    body.textContent = "";
    check.causes.forEach(function (cause) {
      var row = el("tr");
      row.appendChild(el("td", cause.issue));
      row.appendChild(el("td", cause.cause));
      row.appendChild(el("td", cause.fix));
      body.appendChild(row);
    });
    box.hidden = check.ok || check.causes.length === 0;
  }

  function render(status) {
    var passed = 0;
    status.checks.forEach(function (check) {
      var item = list.querySelector('[data-check="' + check.key + '"]');
      if (!item) { return; }
      if (check.ok) { passed += 1; }
      item.classList.toggle("check-ok", check.ok);
      item.classList.toggle("check-pending", !check.ok);
      item.querySelector(".check-icon").textContent = check.ok ? "\u2713" : "\u2026";
      item.querySelector(".check-state").textContent = check.ok ? "done" : "pending";
      item.querySelector(".check-detail").textContent = check.detail;
      renderCauses(item, check);
    });
    var text = passed + " of " + status.checks.length + " checks passed" +
      (status.done ? ": the cluster is onboarded." : "; this page checks again every few seconds.");
    if (summary.textContent !== text) { summary.textContent = text; }
    nodes.querySelector(".node-count").textContent = String(status.node_agents);
    nodes.querySelector(".node-total").textContent =
      status.nodes === null ? "" : " of " + status.nodes + " nodes in the inventory";
    var ul = warnings.querySelector("ul");
    ul.textContent = "";
    status.warnings.forEach(function (w) {
      var li = el("li");
      li.appendChild(el("code", w.kind));
      li.appendChild(document.createTextNode(" " + w.message));
      ul.appendChild(li);
    });
    warnings.hidden = status.warnings.length === 0;
    doneBanner.hidden = !status.done;
    return status.done;
  }

  function tick() {
    fetch(url, { headers: { "X-Proxima-Fetch": "1", "Accept": "application/json" }, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) { window.location.reload(); return null; }
        return response.ok ? response.json() : null;
      })
      .then(function (status) {
        if (status && render(status)) { return; }
        window.setTimeout(tick, INTERVAL);
      }, function () { window.setTimeout(tick, INTERVAL); });
  }

  tick();
})();
