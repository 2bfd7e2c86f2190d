// Boxes that scroll sideways can be scrolled from the keyboard.
//
// A wide table, formula, code block, notebook cell or figure scrolls in
// its own box (extra.css) instead of widening the page; a reader without
// a mouse reaches such a box only when it takes the focus (WCAG 2.1.1,
// axe-core's scrollable-region-focusable). Which boxes scroll depends on
// the screen's width, so each gets, only while it overflows:
//   tabindex="0"           the Tab key stops there; arrows then scroll it
//   role="group"           a named group, not a landmark: many per page
//   aria-label="Table, scrolls sideways"   what it holds
// and loses them when the window grows wide enough to show it whole.
// Material's own code blocks (pre > code, tabindex="0") are left alone.
//
// Every such box also says that it holds more than it shows: while
// content is hidden past an edge it carries data-mha-more="left",
// "right" or "left right", updated as it scrolls, and extra.css fades
// that edge out (a table's last visible column, half a figure): a value
// cut at the edge never passes for a whole one. The browser tests check
// that every box hiding content shows this cue.
// Runs on Material's document$ (first load and every instant navigation),
// after each resize and when the content changes (a control's tables);
// the browser tests run axe-core on every page.
(function () {
  "use strict";

  var MARK = "data-mha-scroll";
  var KINDS = [
    ["table, .md-typeset__scrollwrap", "Table"],
    [".katex-display, .katex", "Formula"],
    ["pre, code, .highlight-ipynb", "Code"],
    ["img, svg", "Figure"],
  ];

  // What the box is, else what it holds: a table of formulas is a table.
  function kind(box) {
    var found = KINDS.filter(function (k) {
      return box.matches(k[0]);
    })[0] || KINDS.filter(function (k) {
      return box.querySelector(k[0]) !== null;
    })[0];
    return found ? found[1] : "Content";
  }

  var MORE = "data-mha-more";

  // Which edges hide content: "", "left", "right" or "left right".
  function hidden(box) {
    var left = box.scrollLeft > 1;
    var right = box.scrollLeft + box.clientWidth < box.scrollWidth - 1;
    return (left ? "left" : "") + (left && right ? " " : "") +
      (right ? "right" : "");
  }

  function cue(box) {
    var edges = scrolls(box) ? hidden(box) : "";
    if (edges) {
      if (box.getAttribute(MORE) !== edges) {
        box.setAttribute(MORE, edges);
      }
    } else if (box.hasAttribute(MORE)) {
      box.removeAttribute(MORE);
    }
  }

  function scrolls(box) {
    if (box.scrollWidth <= box.clientWidth + 1) {
      return false; // cheap test first: most elements never overflow
    }
    var overflow = getComputedStyle(box).overflowX;
    return overflow === "auto" || overflow === "scroll";
  }

  // Focusable already, by itself or through a link or input inside.
  function reachable(box) {
    return (
      (box.hasAttribute("tabindex") && !box.hasAttribute(MARK)) ||
      box.matches("a[href], button, input, select, textarea") ||
      box.querySelector("a[href], button, input, select, textarea, " +
                        "[tabindex]:not([tabindex='-1'])") !== null
    );
  }

  function mark(box) {
    box.setAttribute(MARK, "");
    box.setAttribute("tabindex", "0");
    if (!box.hasAttribute("role")) {
      box.setAttribute("role", "group");
      box.setAttribute("aria-label", kind(box) + ", scrolls sideways");
    }
  }

  function unmark(box) {
    box.removeAttribute(MARK);
    box.removeAttribute("tabindex");
    if (box.getAttribute("role") === "group") {
      box.removeAttribute("role");
      box.removeAttribute("aria-label");
    }
  }

  function update() {
    var content = document.querySelector(".md-content");
    if (!content) {
      return;
    }
    content.querySelectorAll("[" + MARK + "]").forEach(function (box) {
      if (!scrolls(box)) {
        unmark(box);
      }
    });
    content.querySelectorAll("[" + MORE + "]").forEach(cue);
    content.querySelectorAll("*").forEach(function (box) {
      if (!scrolls(box)) {
        return;
      }
      cue(box);
      if (!box.hasAttribute(MARK) && !reachable(box)) {
        mark(box);
      }
    });
  }

  // a box scrolled by the reader: its cue follows (scroll events do not
  // bubble, but the document sees them while capturing)
  document.addEventListener("scroll", function (event) {
    var box = event.target;
    if (box instanceof Element && box.closest(".md-content")) {
      cue(box);
    }
  }, true);

  var pending = null;
  function later() {
    if (pending === null) {
      pending = window.requestAnimationFrame(function () {
        pending = null;
        update();
      });
    }
  }

  // a control redraws its tables on each input: look again then too
  var redrawn = new MutationObserver(later);
  window.addEventListener("resize", later);
  document$.subscribe(function () {
    later();
    var content = document.querySelector(".md-content");
    redrawn.disconnect();
    if (content) {
      redrawn.observe(content, { childList: true, subtree: true });
    }
    // figures and fonts change widths as they arrive
    window.addEventListener("load", later, { once: true });
    if (document.fonts) {
      document.fonts.ready.then(later);
    }
  });
  window.mhaScrollRegions = { update: update };
})();
