// The attention-matrix control: edit Q, K and V of the four-token
// example, switch the causal mask and key padding, see A and O = AV.
//
// <div class="mha-control" data-control="attention-matrix"
//      data-q="[[...]]" data-k="[[...]]" data-v="[[...]]"
//      data-mask="[[...]]">   (the page's example, from generated data)
(function () {
  "use strict";

  var w = window.mhaWidgets;

  function sameMask(a, b) {
    return a.every(function (row, i) {
      return row.every(function (x, j) {
        return x === b[i][j];
      });
    });
  }

  window.mhaControls["attention-matrix"] = function (root) {
    var example = {
      q: w.data(root, "q"),
      k: w.data(root, "k"),
      v: w.data(root, "v"),
    };
    var t = example.k.length;
    var positions = window.mhaRef.range(0, t); // from 0, as in the code
    var exampleCausal = sameMask(w.data(root, "mask"),
                                 window.mhaRef.causalMask(t));

    var grids = ["Q", "K", "V"].map(function (name) {
      return w.matrixInput(name, example[name.toLowerCase()], render);
    });
    var causal = w.el("input", { type: "checkbox",
                                 "data-option": "causal" });
    causal.checked = exampleCausal;
    causal.addEventListener("change", render);
    var padding = w.el("input", {
      type: "number", min: 0, max: t - 1, step: 1, value: 0,
      "data-option": "padding",
    });
    padding.addEventListener("input", render);
    var reset = w.el("button", { type: "button", class: "md-button",
                                 text: "Back to the page's example" });
    reset.addEventListener("click", function () {
      grids.forEach(function (grid, n) {
        grid.set(example["qkv"[n]]);
      });
      causal.checked = exampleCausal;
      padding.value = 0;
      render();
    });
    var results = w.el("div", { class: "mha-results" });
    var status = w.status();

    root.append(
      w.caption("Rows of Q, K and V are positions; row i of the weights " +
                "is query i, column j is key j."),
      w.el("div", { class: "mha-row" }, grids.map(function (g) {
        return g.node;
      })),
      w.el("div", { class: "mha-row mha-options" }, [
        w.el("label", { class: "mha-check" }, [causal, " causal mask"]),
        w.labelled("key padding: last keys blocked", padding),
        reset,
      ]),
      results,
      status
    );

    function render() {
      var pad = w.readWhole(padding, 0, t - 1);
      results.textContent = "";
      if (pad === null) {
        status.textContent = w.wholeRule("Key padding", 0, t - 1) +
          ": every query needs one key it may read.";
        return;
      }
      var mask = window.mhaRef.causalMask(t).map(function (row) {
        return row.map(function (future, j) {
          return (causal.checked && future) || j >= t - pad;
        });
      });
      var tables;
      try {
        var result = window.mhaRef.attention(
          grids[0].read(), grids[1].read(), grids[2].read(), mask
        );
        tables = [
          w.numberTable("weights", "Weights A", result.weights, {
            blocked: mask, rowHeads: positions, colHeads: positions,
            corner: "query \\ key", fixed: true,
          }),
          w.numberTable("output", "Output O = AV", result.output, {
            rowHeads: positions, fixed: true,
          }),
        ];
      } catch (error) {
        // an empty box, a number beyond float64, scores that overflow:
        // say what is wrong instead of showing NaN
        status.textContent = error.message;
        return;
      }
      results.append.apply(results, tables);
      var blocked = [];
      if (causal.checked) {
        blocked.push("the future (causal mask)");
      }
      if (pad > 0) {
        blocked.push("the last " + (pad === 1 ? "key" : pad + " keys") +
                     " (padding)");
      }
      status.textContent = blocked.length
        ? "Hatched cells are blocked: " + blocked.join(" and ") + "."
        : "Nothing is blocked: every query reads every key.";
    }

    render();
  };
})();
