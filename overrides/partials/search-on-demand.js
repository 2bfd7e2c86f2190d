// The search index loads when a reader first opens the search.
//
// Material (and Zensical's port of it) downloads the whole search index
// (search/search_index.json, search.json: about 300 KB, more than the
// page) on every first view, before anyone searches. This script runs
// before the theme's bundle (overrides/main.html inlines it in <head>)
// and holds that one request back until the reader reaches for the
// search: a click or tap on it, the focus in its box, or a key that
// opens it (/, s, f, Ctrl/Cmd-K). A page opened from a search result
// (?h=..., search.highlight) needs the index at once and gets it. The
// theme's own code is unchanged: it sees its request answered later.
(function () {
  "use strict";

  var INDEX = /\/search(\/search_index)?\.json(\?|#|$)/;
  var wanted = /[?&]h=/.test(location.search);
  var held = [];
  var open = XMLHttpRequest.prototype.open;
  var send = XMLHttpRequest.prototype.send;

  XMLHttpRequest.prototype.open = function (method, url) {
    this.mhaSearchIndex = INDEX.test(String(url));
    return open.apply(this, arguments);
  };
  XMLHttpRequest.prototype.send = function () {
    if (this.mhaSearchIndex && !wanted) {
      held.push([this, arguments]);
      return undefined;
    }
    return send.apply(this, arguments);
  };

  function want() {
    if (wanted) {
      return;
    }
    wanted = true;
    held.splice(0).forEach(function (request) {
      send.apply(request[0], request[1]);
    });
  }

  function onSearch(event) {
    var target = event.target;
    if (
      target instanceof Element &&
      target.closest(
        ".md-search, [data-md-component='search'], label[for='__search']"
      )
    ) {
      want();
    }
  }

  var KEYS = ["/", "s", "S", "f", "F"];
  document.addEventListener("pointerdown", onSearch, true);
  document.addEventListener("focusin", onSearch, true);
  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "__search") {
      want();
    }
  }, true);
  document.addEventListener("keydown", function (event) {
    var modified = event.ctrlKey || event.metaKey;
    if (
      (!modified && KEYS.indexOf(event.key) >= 0) ||
      (modified && (event.key === "k" || event.key === "K"))
    ) {
      want();
    }
  }, true);
})();
