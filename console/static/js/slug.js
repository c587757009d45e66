// The cluster slug, derived as you type with the chart's rule (docs/chart.md, contracts/slugs.py):
// replace runs of anything but ASCII letters, digits and '-' by one '-' before lowercasing,
// collapse '-' runs, trim, cut to 63, trim again. Editing the slug by hand stops the derivation.
"use strict";
(function () {
  var MAX = 63;
  var DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

  function slugify(name) {
    var slug = name.replace(/[^A-Za-z0-9-]+/g, "-").toLowerCase();
    slug = slug.replace(/-+/g, "-").replace(/^-+|-+$/g, "");
    return slug.slice(0, MAX).replace(/-+$/, "");
  }

  function isDnsLabel(slug) { return DNS_LABEL.test(slug); }

  window.proxima = window.proxima || {};
  window.proxima.slugify = slugify;
  window.proxima.isDnsLabel = isDnsLabel;

  var form = document.getElementById("cluster-form");
  if (!form) { return; }
  var name = document.getElementById("cluster-name");
  var slug = document.getElementById("cluster-slug");
  var edited = document.getElementById("slug-edited");
  var error = document.getElementById("slug-error");

  function problem() {
    var value = slug.value;
    if (value === "") {
      if (name.value.trim() !== "" && slugify(name.value) === "") {
        return 'clusterAgent.clusterName "' + name.value + '" has no letter or digit to derive a slug from: set clusterAgent.clusterSlug';
      }
      return "";
    }
    if (!isDnsLabel(value)) {
      return 'clusterAgent.clusterSlug "' + value + "\" is not a DNS label: use at most " + MAX +
        " lowercase letters, digits and '-', starting and ending with a letter or digit";
    }
    return "";
  }

  function check() {
    var message = problem();
    slug.setCustomValidity(message);
    if (message) { slug.setAttribute("aria-invalid", "true"); } else { slug.removeAttribute("aria-invalid"); }
    error.textContent = message;
  }

  name.addEventListener("input", function () {
    if (edited.value !== "1") { slug.value = slugify(name.value); }
    check();
  });
  slug.addEventListener("input", function () {
    edited.value = slug.value === "" ? "" : "1";
    if (slug.value === "") { slug.value = slugify(name.value); }
    check();
  });
  if (edited.value !== "1" && slug.value === "" && name.value !== "") { slug.value = slugify(name.value); }
  if (slug.value !== "") { check(); }
})();
