// Typesets the math that pymdownx.arithmatex (generic mode) leaves in <span|div class="arithmatex">,
// with the KaTeX copy this site serves itself (docs/assets/katex): no request leaves the site.
function renderMath() {
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    if (el.dataset.typeset) return;
    var tex = el.textContent.trim();
    var display = tex.startsWith("\\[");
    tex = tex.replace(/^\\[\[(]/, "").replace(/\\[\])]$/, "");
    katex.render(tex, el, { displayMode: display, throwOnError: false });
    el.dataset.typeset = "1";
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(renderMath);   // Material's instant navigation: each page it loads
} else {
  document.addEventListener("DOMContentLoaded", renderMath);
}
