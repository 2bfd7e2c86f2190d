// The scaling control: a d_k slider over the page's scores ([8, -8]),
// showing the scores divided by sqrt(d_k) and their softmax weights.
//
// <div class="mha-control" data-control="scaling" data-scores="[...]"
//      data-d-head="64" data-d-model="512" data-head-sizes="[...]">
// (all from the generated data). The slider steps through the powers of
// two up to the largest head size, plus d_head and d_model; d_k = 1 is
// no scaling at all.
(function () {
  "use strict";

  var w = window.mhaWidgets;

  function sizesUpTo(largest, extra) {
    var sizes = extra.slice();
    for (var d = 1; d <= largest; d *= 2) {
      sizes.push(d);
    }
    return sizes
      .filter(function (d, i) {
        return sizes.indexOf(d) === i;
      })
      .sort(function (a, b) {
        return a - b;
      });
  }

  window.mhaControls.scaling = function (root) {
    var scores = w.data(root, "scores");
    var dHead = w.data(root, "d-head");
    var dModel = w.data(root, "d-model");
    var largest = Math.max.apply(null, w.data(root, "head-sizes"));
    var sizes = sizesUpTo(Math.max(largest, dModel), [dHead, dModel]);
    var notes = {};
    notes[1] = "No scaling, the table's first row.";
    notes[dHead] = "√d_head, the right scale: the table's second row.";
    notes[dModel] = "√d_model, the model width, a mistake: the " +
      "table's last row.";

    var slider = w.el("input", {
      type: "range", min: 0, max: sizes.length - 1, step: 1,
      value: sizes.indexOf(dHead), "data-option": "d_k",
    });
    slider.addEventListener("input", render);
    var shown = w.el("output", { class: "mha-dk" });
    var inputs = scores.map(function (s, j) {
      var input = w.el("input", {
        type: "number", step: "any", value: String(s),
        "data-matrix": "scores", "data-col": j,
      });
      input.addEventListener("input", render);
      return w.labelled("score of key " + (j + 1), input);
    });
    var results = w.el("div", { class: "mha-results" });
    var status = w.status();

    root.append(
      w.el("div", { class: "mha-row mha-options" }, inputs),
      w.el("div", { class: "mha-row mha-options" }, [
        w.labelled("head size d_k", slider),
        shown,
      ]),
      results,
      status
    );

    function render() {
      var d = sizes[Number(slider.value)];
      slider.setAttribute("aria-valuetext", "d_k = " + d);
      shown.textContent = "d_k = " + d + ", divide by √d_k = " +
        w.format(Math.sqrt(d), 4);
      shown.setAttribute("data-value", String(d));
      var s = inputs.map(function (label) {
        return w.readNumber(label.querySelector("input"));
      });
      results.textContent = "";
      var scaled = s.map(function (x) {
        return x / Math.sqrt(d);
      });
      var weights;
      try {
        if (!s.every(isFinite)) {
          throw new RangeError("every score must be a finite number");
        }
        weights = window.mhaRef.softmaxRows([scaled])[0];
      } catch (error) {
        status.textContent = error.message;
        return;
      }
      var keys = s.map(function (_, j) {
        return "key " + (j + 1);
      });
      results.append(
        w.numberTable("scaling", "Divided by √d_k, then softmax",
                      [scaled, weights], {
                        rowHeads: ["scores / √d_k", "weights"],
                        colHeads: keys, digits: 4,
                      }),
        w.el("div", { class: "mha-bars", "aria-hidden": "true" },
             weights.map(function (p, j) {
               return w.el("div", { class: "mha-bar" }, [
                 w.el("span", { text: keys[j] }),
                 w.el("span", { class: "mha-bar-track" }, [
                   w.el("span", { class: "mha-bar-fill",
                                  style: "width: " + 100 * p + "%" }),
                 ]),
               ]);
             }))
      );
      var smallest = Math.min.apply(null, weights);
      status.textContent = (notes[d] ? notes[d] + " " : "") +
        "The smallest weight is " + w.format(smallest, 4) + ".";
    }

    render();
  };
})();
