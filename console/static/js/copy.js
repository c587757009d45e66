// Copy buttons: <button data-copy="ID"> copies the text of #ID and says so in its status line.
"use strict";
(function () {
  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copy(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () { return fallbackCopy(text); });
    }
    return fallbackCopy(text);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) { return; }
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) { return; }
    var status = button.parentNode.querySelector(".copy-status");
    copy(source.textContent).then(function () {
      if (status) { status.textContent = "Copied"; }
      button.textContent = "Copied";
      window.setTimeout(function () {
        button.textContent = "Copy";
        if (status) { status.textContent = ""; }
      }, 2000);
    }, function () {
      if (status) { status.textContent = "Select the text and copy it by hand"; }
    });
  });
})();
