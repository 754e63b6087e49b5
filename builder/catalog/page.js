// Filter the stacks by text, GPU, framework and platform. Everything needed is in data-* attributes of
// each stack and each summary row; no request leaves the page.
(function () {
  "use strict";
  var q = document.getElementById("q"), gpu = document.getElementById("gpu"),
      fw = document.getElementById("fw"), platform = document.getElementById("platform"),
      count = document.getElementById("count"), none = document.getElementById("none");
  function words(el, name) { return (el.getAttribute(name) || "").split(" "); }
  function matches(el) {
    var terms = q.value.toLowerCase().split(/\s+/).filter(Boolean), text = el.getAttribute("data-text") || "";
    for (var i = 0; i < terms.length; i++) { if (text.indexOf(terms[i]) < 0) { return false; } }
    if (gpu.value && words(el, "data-gpus").indexOf(gpu.value) < 0) { return false; }
    if (fw.value && words(el, "data-fw").indexOf(fw.value) < 0) { return false; }
    if (platform.value && words(el, "data-platforms").indexOf(platform.value) < 0) { return false; }
    return true;
  }
  function apply() {
    var shown = 0, items = document.querySelectorAll("[data-stack]");
    for (var i = 0; i < items.length; i++) {
      var ok = matches(items[i]);
      items[i].hidden = !ok;
      if (ok && items[i].tagName === "ARTICLE") { shown++; }
    }
    count.textContent = shown + " of " + document.querySelectorAll("article[data-stack]").length + " stacks";
    none.hidden = shown !== 0;
  }
  [q, gpu, fw, platform].forEach(function (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); });
  apply();
}());
