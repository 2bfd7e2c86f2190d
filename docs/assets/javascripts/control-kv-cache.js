// The KV-cache control: the zero-score example with a cache of length C
// and n new queries (positions C .. C+n-1) against C+n keys, masked
// position-aligned or upper-left; shows the weights and the outputs.
//
// <div class="mha-control" data-control="kv-cache" data-values="[...]"
//      data-query-positions="[3, 4]">   (from the generated data)
// Queries and keys are all zero, so every allowed key gets the same
// score and each output is the mean of the values its row may read.
(function () {
  "use strict";

  var w = window.mhaWidgets;
  var MASKS = {
    aligned: "position-aligned (from positions)",
    "upper-left": "upper-left (is_causal=True)",
  };

  function zeros(rows) {
    return window.mhaRef.range(0, rows).map(function () {
      return [0];
    });
  }

  function maskFor(which, cache, fresh) {
    var r = window.mhaRef;
    var keys = r.range(0, cache + fresh);
    // upper-left: as if the new queries sat at positions 0, 1, ...
    var first = which === "aligned" ? cache : 0;
    return r.positionMask(r.range(first, first + fresh), keys);
  }

  window.mhaControls["kv-cache"] = function (root) {
    var values = w.data(root, "values");
    var queryPositions = w.data(root, "query-positions");
    var n = values.length;
    var name = "kv-mask-" + Math.random().toString(36).slice(2);

    var valueInputs = values.map(function (x, j) {
      var input = w.el("input", {
        type: "number", step: "any", value: String(x),
        "data-matrix": "values", "data-row": j,
      });
      input.addEventListener("input", render);
      return w.labelled("v" + j, input);
    });
    var cache = w.el("input", {
      type: "number", min: 0, max: n - 1, step: 1,
      value: queryPositions[0], "data-option": "cache",
    });
    var fresh = w.el("input", {
      type: "number", min: 1, step: 1,
      value: queryPositions.length, "data-option": "new",
    });
    cache.addEventListener("input", render);
    fresh.addEventListener("input", render);
    var radios = Object.keys(MASKS).map(function (which, i) {
      var radio = w.el("input", { type: "radio", name: name,
                                  value: which, "data-option": "mask" });
      radio.checked = i === 0;
      radio.addEventListener("change", render);
      return w.el("label", { class: "mha-check" }, [radio, " " +
                                                    MASKS[which]]);
    });
    var results = w.el("div", { class: "mha-results" });
    var status = w.status();

    root.append(
      w.caption("A cache of C positions holds keys 0 to C\u22121, " +
                "the new queries sit at positions C, C+1, \u2026, and " +
                "value vj belongs to key j."),
      w.el("div", { class: "mha-row mha-options" }, valueInputs),
      w.el("div", { class: "mha-row mha-options" }, [
        w.labelled("cached positions", cache),
        w.labelled("new queries", fresh),
      ]),
      w.el("fieldset", { class: "mha-row mha-options" }, [
        w.el("legend", { text: "mask:" }),
      ].concat(radios)),
      results,
      status
    );

    function selected() {
      return root.querySelector("input[name='" + name + "']:checked").value;
    }

    function render() {
      var c = w.readWhole(cache, 0, n - 1);
      fresh.max = n - (c === null ? 0 : c);
      results.textContent = "";
      if (c === null) {
        status.textContent = w.wholeRule("Cached positions", 0, n - 1) +
          ".";
        return;
      }
      var f = w.readWhole(fresh, 1, n - c);
      if (f === null) {
        status.textContent = w.wholeRule("New queries", 1, n - c) +
          ": there are " + n + " values and " + c + " are cached.";
        return;
      }
      var which = selected();
      var other = which === "aligned" ? "upper-left" : "aligned";
      var v = valueInputs.slice(0, c + f).map(function (label) {
        return [w.readNumber(label.querySelector("input"))];
      });
      var mask = maskFor(which, c, f);
      var otherResult, tables;
      // rows: the new queries' positions; columns: every key's position
      var rows = window.mhaRef.range(c, c + f);
      var keys = window.mhaRef.range(0, c + f);
      try {
        var result = window.mhaRef.attention(zeros(f), zeros(c + f), v,
                                             mask);
        otherResult = window.mhaRef.attention(
          zeros(f), zeros(c + f), v, maskFor(other, c, f)
        );
        tables = [
          w.numberTable("weights", "Weights, " + MASKS[which],
                        result.weights, {
                          blocked: mask, rowHeads: rows, colHeads: keys,
                          corner: "query \\ key",
                        }),
          w.numberTable("output", "Output", result.output, {
            rowHeads: rows, colHeads: ["mean"], corner: "query",
          }),
        ];
      } catch (error) {
        status.textContent = error.message;
        return;
      }
      results.append.apply(results, tables);
      var others = otherResult.output.map(function (row) {
        return w.format(row[0]);
      });
      var shown = "[" + others.join(", ") + "]";
      // the same up to rounding: five weights of 1/5 times 7 sum to
      // 7.000000000000001 one way and 7 the other
      var same = otherResult.output.every(function (row, i) {
        var a = row[0], b = result.output[i][0];
        return Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(a), Math.abs(b));
      });
      status.textContent = "The " + MASKS[other].split(" (")[0] +
        (c === 0
          ? " mask gives the same " + shown +
            ": with no cache the two masks agree."
          : same
          ? " mask gives the same " + shown +
            " here: these values hide the difference."
          : " mask gives " + shown + " instead.");
    }

    render();
  };
})();
