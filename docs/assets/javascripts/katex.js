// Typeset the math of each page with the self-hosted KaTeX.
//
// pymdownx.arithmatex (generic: true) leaves one formula per element:
//   inline   <span class="arithmatex">\( ... \)</span>
//   display  <div class="arithmatex">\[ ... \]</div>
// so each is rendered whole with katex.render: a formula that fails to
// parse becomes a red .katex-error (auto-render would leave it as raw TeX
// when its braces do not balance).
// The notebook page (mkdocs-jupyter) keeps Jupyter's $...$ and $$...$$ in
// its Markdown cells and LaTeX outputs: auto-render finds those.
//
// Material's document$ emits on the first load and again after every
// instant navigation, so each new page is typeset.
(function () {
  "use strict";

  var common = { throwOnError: false, errorColor: "#cc0000" };
  var wrapped = /^\\\(([\s\S]*)\\\)$|^\\\[([\s\S]*)\\\]$/;

  function renderArithmatex(el) {
    var match = wrapped.exec(el.textContent.trim());
    if (match === null) {
      return; // already typeset
    }
    var display = match[2] !== undefined;
    katex.render(
      display ? match[2] : match[1],
      el,
      Object.assign({ displayMode: display }, common)
    );
  }

  var notebook = Object.assign({}, common, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
  });
  var notebookMath =
    ".jupyter-wrapper .jp-RenderedMarkdown, " +
    ".jupyter-wrapper .jp-RenderedLatex";

  document$.subscribe(function (doc) {
    doc.body.querySelectorAll(".arithmatex").forEach(renderArithmatex);
    doc.body.querySelectorAll(notebookMath).forEach(function (el) {
      renderMathInElement(el, notebook);
    });
  });
})();
