// Typesets the site's formulas. pymdownx.arithmatex (generic mode, mkdocs.yml) keeps each formula whole in
// <span class="arithmatex">\( ... \)</span> or <div class="arithmatex">\[ ... \]</div>; KaTeX, served from this site
// (docs/assets/katex/, see SOURCE.txt there), renders them here. A formula KaTeX cannot parse stays as its source,
// with KaTeX's message in the element's data-katex-error and on the console: tests/test_docs.py reports both.
document$.subscribe(() => {
  for (const element of document.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: true, // an unknown command is an error, not red text inside the formula
      errorCallback: (message, error) => {
        element.dataset.katexError = `${error}`;
        console.error(message, error);
      },
    });
  }
});
