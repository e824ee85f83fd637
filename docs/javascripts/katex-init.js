// Typesets the formulas that pymdownx.arithmatex (generic mode) leaves in
// <span class="arithmatex">\( ... \)</span> and <div class="arithmatex">\[ ... \]</div>,
// with the KaTeX served from this site (javascripts/katex/): no network at view time.
document$.subscribe(function () {
  document.querySelectorAll(".arithmatex").forEach(function (element) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
});
