// Typeset, in the browser, only the math the build left untypeset.
//
// `make site` typesets every formula of the Markdown pages into the HTML
// (pipeline/typeset_math.py), so those pages need no KaTeX JavaScript.
// Two cases still hold raw TeX:
//   - `make serve`, which does not run that post-build step; arithmatex
//     (generic: true) leaves one formula per element:
//       inline   <span class="arithmatex">\( ... \)</span>
//       display  <div class="arithmatex">\[ ... \]</div>
//   - a notebook page (mkdocs-jupyter) under `make serve`: its Markdown
//     cells and LaTeX outputs keep Jupyter's $...$ and $$...$$ (the
//     post-build step typesets those too).
// Only then is katex.min.js (and auto-render, for the notebook) loaded,
// once, from this script's own folder. Material's instant navigation
// does not re-run a page's scripts: document$ emits on the first load
// and after every navigation, so each new page is checked here.
(function () {
  "use strict";

  var here = document.currentScript.src;
  var katexUrl = new URL("../katex/katex.min.js", here).href;
  var autoRenderUrl = new URL(
    "../katex/contrib/auto-render.min.js",
    here
  ).href;

  var common = {
    throwOnError: false,
    errorColor: "#cc0000",
    output: "htmlAndMathml",
  };
  var wrapped = /^\\\(([\s\S]*)\\\)$|^\\\[([\s\S]*)\\\]$/;
  var notebookMath =
    ".jupyter-wrapper .jp-RenderedMarkdown, " +
    ".jupyter-wrapper .jp-RenderedLatex";
  var notebook = Object.assign({}, common, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
  });

  var loaded = {};
  function load(url) {
    if (!loaded[url]) {
      loaded[url] = new Promise(function (resolve, reject) {
        var script = document.createElement("script");
        script.src = url;
        script.onload = resolve;
        script.onerror = function () {
          reject(new Error("cannot load " + url));
        };
        document.head.appendChild(script);
      });
    }
    return loaded[url];
  }

  // arithmatex elements still holding \( \) or \[ \]
  function untypeset(body) {
    return Array.prototype.filter.call(
      body.querySelectorAll(".arithmatex"),
      function (el) {
        return wrapped.test(el.textContent.trim());
      }
    );
  }

  // a formula that fails to parse becomes a red .katex-error (whole
  // elements: auto-render would leave unbalanced braces as raw TeX)
  function renderArithmatex(el) {
    var match = wrapped.exec(el.textContent.trim());
    if (match === null) {
      return; // typeset meanwhile
    }
    var display = match[2] !== undefined;
    katex.render(
      display ? match[2] : match[1],
      el,
      Object.assign({ displayMode: display }, common)
    );
  }

  function typeset(body) {
    var formulas = untypeset(body);
    var cells = Array.prototype.filter.call(
      body.querySelectorAll(notebookMath),
      function (el) {
        var prose = el.cloneNode(true); // without code or typeset math
        prose.querySelectorAll("pre, code, .katex").forEach(function (e) {
          e.remove();
        });
        return /\$|\\\(|\\\[/.test(prose.textContent);
      }
    );
    if (!formulas.length && !cells.length) {
      return; // typeset at build time: load nothing
    }
    var ready = load(katexUrl);
    if (cells.length) {
      ready = ready.then(function () {
        return load(autoRenderUrl);
      });
    }
    ready.then(function () {
      formulas.forEach(renderArithmatex);
      cells.forEach(function (el) {
        renderMathInElement(el, notebook);
      });
    });
  }

  document$.subscribe(function (doc) {
    typeset(doc.body);
  });
})();
