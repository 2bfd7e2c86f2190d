// Build the interactive controls of the page that is shown.
//
// A page holds <div class="mha-control" data-control="NAME" data-...>
// with its generated example in data- attributes. The code and style of
// a control load only on a page that has one (a page without a control
// fetches none of it): the controls' stylesheet
// (../stylesheets/controls.css), the shared parts, attention.js (the
// math) and widgets.js (the DOM helpers and the registry
// window.mhaControls), then control-NAME.js, which registers the
// builder of NAME; all beside this script, each once per visit. Material's document$
// emits on the first load and after every instant navigation, so the
// controls of each new page are built.
(function () {
  "use strict";

  var here = document.currentScript.src;
  var SHARED = ["attention.js", "widgets.js"];
  var NAME = /^[a-z][a-z0-9-]*$/;

  var STYLE = "../stylesheets/controls.css";

  var loaded = {};
  function load(file) {
    if (!loaded[file]) {
      loaded[file] = new Promise(function (resolve, reject) {
        var css = /\.css$/.test(file);
        var node = document.createElement(css ? "link" : "script");
        if (css) {
          node.rel = "stylesheet";
          node.href = new URL(file, here).href;
        } else {
          node.src = new URL(file, here).href;
        }
        node.onload = resolve;
        node.onerror = function () {
          reject(new Error("cannot load " + file));
        };
        document.head.appendChild(node);
      });
    }
    return loaded[file];
  }

  // the style, attention.js, widgets.js, then the control's own file
  function code(name) {
    return [STYLE].concat(SHARED, ["control-" + name + ".js"]).reduce(
      function (ready, file) {
        return ready.then(function () {
          return load(file);
        });
      },
      Promise.resolve()
    );
  }

  function build(root) {
    var name = root.getAttribute("data-control");
    var builder = (window.mhaControls || {})[name];
    root.textContent = "";
    if (!builder) {
      root.textContent = "Unknown control: " + name;
      return;
    }
    try {
      builder(root);
      root.setAttribute("data-ready", "");
    } catch (error) {
      root.textContent = "This control could not start: " + error.message;
      console.error(error);
    }
  }

  function start(root) {
    if (root.hasAttribute("data-ready") || root.hasAttribute("data-loading")) {
      return;
    }
    var name = root.getAttribute("data-control");
    if (!NAME.test(name)) {
      root.textContent = "Unknown control: " + name;
      return;
    }
    root.setAttribute("data-loading", "");
    code(name).then(function () {
      root.removeAttribute("data-loading");
      build(root);
    }, function (error) {
      root.removeAttribute("data-loading");
      root.textContent = "This control could not start: " + error.message;
    });
  }

  document$.subscribe(function (doc) {
    doc.body.querySelectorAll(".mha-control[data-control]").forEach(start);
  });
})();
