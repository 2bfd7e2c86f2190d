// The trained-heads control: the reader's own letters through the model
// trained by the build (scripts/trained-heads.py), every head's weights
// and the predicted next letters, with heads switched off at will.
//
// <div class="mha-control" data-control="trained-heads"></div>
// The weights come from generated/exports/trained-heads.json, found
// relative to this script (assets/javascripts/ sits under the site
// root), so the site works under any path. The forward is the one of
// mha_ref/induction.py, in float64, each head through window.mhaRef's
// attention; tests/browser/test_trained_heads.py holds it to mha_ref.
(function () {
  "use strict";

  var w = window.mhaWidgets;
  var here = document.currentScript && document.currentScript.src;
  var EXPORT = new URL(
    "../../generated/exports/trained-heads.json", here || location.href
  ).href;
  var loading = null; // one fetch per page load, kept across navigation

  // base64 of little-endian float32 -> rows of float64 numbers
  function matrix(entry) {
    var bytes = Uint8Array.from(atob(entry.float32), function (c) {
      return c.charCodeAt(0);
    });
    var view = new DataView(bytes.buffer);
    var rows = entry.shape[0];
    var cols = entry.shape[1];
    if (bytes.length !== 4 * rows * cols) {
      throw new RangeError("weights of shape " + entry.shape +
                           " hold " + bytes.length + " bytes");
    }
    var out = [];
    for (var i = 0; i < rows; i++) {
      var row = new Array(cols);
      for (var j = 0; j < cols; j++) {
        row[j] = view.getFloat32(4 * (i * cols + j), true);
      }
      out.push(row);
    }
    return out;
  }

  function load() {
    if (!loading) {
      loading = fetch(EXPORT).then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status + " for " + EXPORT);
        }
        return response.json();
      }).then(function (data) {
        var weights = {};
        Object.keys(data.weights).forEach(function (key) {
          weights[key] = matrix(data.weights[key]);
        });
        return Object.assign({}, data, { weights: weights });
      });
      loading.catch(function () {
        loading = null; // try again on the next page
      });
    }
    return loading;
  }

  function columns(a, start, stop) {
    return a.map(function (row) {
      return row.slice(start, stop);
    });
  }

  function add(a, b) {
    return a.map(function (row, i) {
      return row.map(function (x, j) {
        return x + b[i][j];
      });
    });
  }

  function softmax(row) {
    return window.mhaRef.softmaxRows([row])[0];
  }

  // tokens: ints; keep[layer][head] false removes that head's output.
  // Returns {weights[layer][head] (T, T), logits (T, vocab), probs}.
  function forward(model, tokens, keep) {
    var r = window.mhaRef;
    var W = model.weights;
    var t = tokens.length;
    var dHead = model.d_model / model.n_head;
    var mask = r.causalMask(t); // true = blocked: the future
    var x = tokens.map(function (token, i) {
      return W.embed[token].map(function (e, c) {
        return e + W.pos_embed[i][c];
      });
    });
    var weights = [];
    for (var n = 0; n < model.n_layer; n++) {
      var q = r.matmul(x, W[n + ".wq"]);
      var k = r.matmul(x, W[n + ".wk"]);
      var v = r.matmul(x, W[n + ".wv"]);
      var heads = [];
      var layerWeights = [];
      for (var h = 0; h < model.n_head; h++) {
        var cols = [h * dHead, (h + 1) * dHead];
        var head = r.attention(columns(q, cols[0], cols[1]),
                               columns(k, cols[0], cols[1]),
                               columns(v, cols[0], cols[1]), mask);
        layerWeights.push(head.weights);
        heads.push(keep[n][h] ? head.output : head.output.map(function (row) {
          return row.map(function () {
            return 0;
          });
        }));
      }
      // Concat(head_1, ..., head_h) Wo, added to the residual stream
      var concat = x.map(function (_, i) {
        return [].concat.apply([], heads.map(function (z) {
          return z[i];
        }));
      });
      x = add(x, r.matmul(concat, W[n + ".wo"]));
      weights.push(layerWeights);
    }
    var logits = r.matmul(x, W.unembed);
    return { weights: weights, logits: logits, probs: logits.map(softmax) };
  }

  // "abc ab" -> {tokens} or {error}: letters of the model only
  function parse(text, letters, tMax) {
    var clean = text.toLowerCase().replace(/\s+/g, "");
    if (clean.length === 0) {
      return { error: "Type at least one letter, from " + letters[0] +
               " to " + letters[letters.length - 1] + "." };
    }
    for (var i = 0; i < clean.length; i++) {
      if (letters.indexOf(clean[i]) < 0) {
        return { error: "\u201c" + clean[i] + "\u201d is not a token of " +
                 "this model: it knows only the letters " +
                 letters.split("").join(" ") + "." };
      }
    }
    if (clean.length > tMax) {
      return { error: clean.length + " letters: the model has learned " +
               "positions 0 to " + (tMax - 1) + " only, so at most " +
               tMax + "." };
    }
    return { tokens: clean.split("").map(function (c) {
      return letters.indexOf(c);
    }) };
  }

  // a random sequence with a repeated segment, as in training
  function randomSequence(letters, t) {
    var pick = function (n) {
      return Math.floor(Math.random() * n);
    };
    var length = 3 + pick(t / 2 - 2); // 3 .. t / 2
    var start = pick(t - 2 * length + 1);
    var out = [];
    for (var i = 0; i < t; i++) {
      var inRepeat = i >= start + length && i < start + 2 * length;
      out.push(inRepeat ? out[i - length] : letters[pick(letters.length)]);
    }
    return out.join("");
  }

  function heatmap(name, weights, letters) {
    var t = weights.length;
    var head = w.el("thead", {}, [w.el("tr", {}, [
      w.el("th", { scope: "col" }),
    ].concat(letters.map(function (c) {
      return w.el("th", { scope: "col", text: c });
    })))]);
    var body = w.el("tbody", {}, weights.map(function (row, i) {
      return w.el("tr", {}, [w.el("th", { scope: "row", text: letters[i] })]
        .concat(row.map(function (x, j) {
          return w.el("td", {
            "data-value": String(x),
            class: j > i ? "mha-blocked" : null,
            style: "--w: " + x.toFixed(4),
            title: "query " + i + ", key " + j + ": " + w.format(x, 3),
          });
        })));
    }));
    // the strongest key of the last query, and the mean weight on the
    // previous token: what a screen reader hears instead of the grid
    var previous = 0;
    for (var i = 1; i < t; i++) {
      previous += weights[i][i - 1] / (t - 1);
    }
    var summary = name + ": " + (t > 1
      ? "mean weight on the previous letter " + w.format(previous, 2)
      : "one letter, weight 1 on itself") + ".";
    return w.el("figure", { class: "mha-heat" }, [
      w.el("figcaption", { text: name }),
      w.el("div", { class: "mha-scroll", role: "img",
                    "aria-label": summary }, [
        w.el("table", { "data-role": "weights", "data-head": name,
                        "aria-hidden": "true" }, [head, body]),
      ]),
    ]);
  }

  // The longest segment (3 letters or more) that repeats right after
  // itself, as in training: {start, length}, or null. Inside its
  // repeat, the next letter is the one that followed the first time.
  function repeatIn(tokens) {
    var t = tokens.length;
    for (var length = Math.floor(t / 2); length >= 3; length--) {
      for (var start = 0; start + 2 * length <= t; start++) {
        var same = true;
        for (var i = 0; i < length && same; i++) {
          same = tokens[start + i] === tokens[start + length + i];
        }
        if (same) {
          return { start: start, length: length };
        }
      }
    }
    return null;
  }

  // Positions whose next letter the repeat determines: the second
  // copy, but its last letter (its next letter is random again).
  function predictable(tokens) {
    var found = repeatIn(tokens);
    return tokens.map(function (_, i) {
      return found !== null && i >= found.start + found.length &&
        i < found.start + 2 * found.length - 1;
    });
  }

  function predictions(result, tokens, letters) {
    var t = tokens.length;
    var guess = result.probs.map(function (p) {
      return p.indexOf(Math.max.apply(null, p));
    });
    var known = predictable(tokens);
    // a predictable position's cells are shaded, and say so to a title
    var shade = function (i, attributes) {
      if (known[i]) {
        attributes["data-predictable"] = "true";
        attributes.class = ((attributes.class || "") +
                            " mha-predictable").trim();
        attributes.title = "the repeat determines the next letter";
      }
      return attributes;
    };
    // never trained there: its guess and probability are greyed out
    var untrained = function (i, attributes) {
      if (!known[i]) {
        attributes.class = ((attributes.class || "") +
                            " mha-untrained").trim();
      }
      return attributes;
    };
    var row = function (label, cells) {
      return w.el("tr", {}, [w.el("th", { scope: "row", text: label })]
        .concat(cells));
    };
    // the title sits outside the box that scrolls, so a phone shows it
    var id = "mha-predictions-" + Math.random().toString(36).slice(2);
    var title = w.el("p", { id: id, class: "mha-table-title",
                            text: "The model's next letter after each " +
                                  "position, and its probability" });
    var table = w.el("table", { "data-role": "predictions",
                                "aria-labelledby": id }, [
      w.el("tbody", {}, [
        row("position", tokens.map(function (_, i) {
          return w.el("td", shade(i, { text: i }));
        })),
        row("letter", tokens.map(function (token, i) {
          return w.el("td", shade(i, { text: letters[token] }));
        })),
        row("predicts", guess.map(function (g, i) {
          // right or wrong only where the repeat determines the next
          // letter: elsewhere it is random, and a cross would blame the
          // model for what no model can know
          var next = known[i] && i + 1 < t ? tokens[i + 1] : null;
          var mark = next === null ? "" : (g === next ? " \u2713" : " \u2717");
          return w.el("td", untrained(i, shade(i, {
            "data-token": letters[g],
            class: next === null ? null
              : (g === next ? "mha-right" : "mha-wrong"),
            text: letters[g] + mark,
          })));
        })),
        row("probability", guess.map(function (g, i) {
          var p = result.probs[i][g];
          return w.el("td", untrained(i, shade(i, {
            "data-value": String(p), text: w.format(p, 2) })));
        })),
      ]),
    ]);
    // the score counts the predictable positions only: elsewhere the
    // next letter is random, and no model can do better than chance
    var right = 0;
    var total = 0;
    for (var i = 0; i + 1 < t; i++) {
      if (known[i]) {
        total += 1;
        right += guess[i] === tokens[i + 1] ? 1 : 0;
      }
    }
    return { node: w.el("div", {}, [
      title, w.el("div", { class: "mha-scroll" }, [table]),
    ]), right: right, total: total };
  }

  window.mhaControls["trained-heads"] = function (root) {
    var status = w.status();
    root.append(
      w.caption("Type the model's letters (spaces are ignored), or draw " +
                "a random sequence with a repeat; switch heads off to " +
                "see what the model loses."),
      status
    );
    status.textContent = "Loading the trained weights\u2026";
    load().then(function (model) {
      build(root, model, status);
    }).catch(function (error) {
      status.textContent = "The trained weights could not be loaded (" +
        error.message + "): build the site with `make site`.";
    });
  };

  function build(root, model, status) {
    var letters = model.letters;
    var input = w.el("input", {
      type: "text", value: model.example, maxlength: 64,
      spellcheck: "false", autocomplete: "off", autocapitalize: "none",
      "data-option": "sequence", size: 26,
    });
    input.addEventListener("input", render);
    var random = w.el("button", { type: "button", class: "md-button",
                                  text: "Random sequence with a repeat" });
    random.addEventListener("click", function () {
      input.value = randomSequence(letters, model.t_max);
      render();
    });
    var reset = w.el("button", { type: "button", class: "md-button",
                                 text: "Back to the page's example" });
    var boxes = [];
    var fieldsets = [];
    for (var n = 0; n < model.n_layer; n++) {
      var row = [];
      var items = [w.el("legend", { text: "Layer " + n + " heads on:" })];
      for (var h = 0; h < model.n_head; h++) {
        var name = model.names[n * model.n_head + h];
        var box = w.el("input", { type: "checkbox", "data-head": name });
        box.checked = true;
        box.addEventListener("change", render);
        row.push(box);
        items.push(w.el("label", { class: "mha-check" }, [box, " " + name]));
      }
      boxes.push(row);
      fieldsets.push(w.el("fieldset", { class: "mha-row mha-options" },
                          items));
    }
    reset.addEventListener("click", function () {
      input.value = model.example;
      boxes.forEach(function (row) {
        row.forEach(function (box) {
          box.checked = true;
        });
      });
      render();
    });
    var results = w.el("div", { class: "mha-results mha-stack" });
    root.insertBefore(w.el("div", { class: "mha-row mha-options" }, [
      w.labelled("letters (" + letters[0] + " to " +
                 letters[letters.length - 1] + ")", input), random, reset,
    ]), status);
    fieldsets.forEach(function (fieldset) {
      root.insertBefore(fieldset, status);
    });
    root.insertBefore(results, status);

    var showGrids = false;

    function render() {
      results.textContent = "";
      var parsed = parse(input.value, letters, model.t_max);
      input.setAttribute("aria-invalid", parsed.error ? "true" : "false");
      if (parsed.error) {
        status.textContent = parsed.error;
        return;
      }
      var keep = boxes.map(function (row) {
        return row.map(function (box) {
          return box.checked;
        });
      });
      var result;
      try {
        result = forward(model, parsed.tokens, keep);
        var shown = predictions(result, parsed.tokens, letters);
      } catch (error) {
        status.textContent = error.message;
        return;
      }
      var seq = parsed.tokens.map(function (token) {
        return letters[token];
      });
      var grids = w.el("div", { class: "mha-heats" });
      result.weights.forEach(function (layer, n) {
        layer.forEach(function (weights, h) {
          grids.append(heatmap(model.names[n * model.n_head + h], weights,
                               seq));
        });
      });
      // the eight grids are one click away, so the page stays short;
      // the reader's choice to open them is kept across edits
      var more = w.el("details", { class: "mha-heads-details" }, [
        w.el("summary", { text: "Every head's attention weights" }),
        grids,
      ]);
      more.open = showGrids;
      more.addEventListener("toggle", function () {
        showGrids = more.open;
      });
      results.append(shown.node, more);
      var off = [];
      keep.forEach(function (row, n) {
        row.forEach(function (on, h) {
          if (!on) {
            off.push(model.names[n * model.n_head + h]);
          }
        });
      });
      status.textContent = (shown.total > 0
        ? "The model predicts " + shown.right + " of the " + shown.total +
          " letters that the repeat determines (shaded). "
        : "No segment of 3 letters or more repeats right after " +
          "itself, so no next letter can be predicted. ") +
        (off.length ? "Heads off: " + off.join(", ") + "."
                    : "All heads on.");
    }

    render();
    root.mhaTrainedHeads = { model: model, forward: forward };
  }

  // for the browser tests: the forward, the parser, the weights' URL
  window.mhaTrainedHeads = {
    forward: forward, parse: parse, load: load, url: EXPORT,
    predictable: predictable,
  };
})();
