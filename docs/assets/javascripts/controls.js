// Build the interactive controls of the page that is shown.
//
// A page holds <div class="mha-control" data-control="NAME" data-...>
// with its generated example in data- attributes; control-NAME.js has
// registered a builder for it in window.mhaControls. Material's document$
// emits on the first load and after every instant navigation, so the
// controls of each new page are built. Loaded after the control-*.js.
(function () {
  "use strict";

  function build(root) {
    if (root.hasAttribute("data-ready")) {
      return;
    }
    var name = root.getAttribute("data-control");
    var builder = window.mhaControls[name];
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

  document$.subscribe(function (doc) {
    doc.body.querySelectorAll(".mha-control[data-control]").forEach(build);
  });
})();
