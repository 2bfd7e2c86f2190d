// The scaling control: why √d_k is the right divisor.
//
// A dot product of d_k independent terms of variance 1 has standard
// deviation √d_k, so the raw scores of the same two keys grow with the
// head size: a key z standard deviations from 0 scores z·√d_k. The
// slider moves d_k; the control shows those raw scores and their softmax
// (unscaled: sharper and sharper as d_k grows), and the scores divided by
// √d_k and their softmax (scaled: the same at every d_k).
//
// <div class="mha-control" data-control="scaling" data-scores="[8, -8]"
//      data-d-head="64" data-d-model="512" data-head-sizes="[...]">
// (all from the generated data). The page's scores belong to d_head, so
// they are z·√d_head: z = scores / √d_head ([1, -1]), which the reader
// may edit. The slider steps through the powers of two up to the largest
// head size (or d_model), plus d_head and d_model; d_k = 1 changes
// nothing.
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

  function bars(label, weights, keys) {
    return w.el("div", { class: "mha-bars", "aria-hidden": "true" }, [
      w.el("div", { class: "mha-bars-title", text: label }),
    ].concat(weights.map(function (p, j) {
      return w.el("div", { class: "mha-bar" }, [
        w.el("span", { text: keys[j] }),
        w.el("span", { class: "mha-bar-track" }, [
          w.el("span", { class: "mha-bar-fill",
                         style: "width: " + 100 * p + "%" }),
        ]),
      ]);
    })));
  }

  window.mhaControls.scaling = function (root) {
    var dHead = w.data(root, "d-head");
    var dModel = w.data(root, "d-model");
    // the page's scores, in standard deviations of a d_head dot product
    var z = w.data(root, "scores").map(function (s) {
      return s / Math.sqrt(dHead);
    });
    var largest = Math.max.apply(null, w.data(root, "head-sizes"));
    var sizes = sizesUpTo(Math.max(largest, dModel), [dHead, dModel]);
    var notes = {};
    notes[1] = "At d_k = 1 dividing by \u221a1 changes nothing: the " +
      "two tables agree.";
    notes[dHead] = "d_k = d_head = " + dHead + ", the page's example.";
    notes[dModel] = "d_k = " + dModel + ", as wide as the whole model.";

    var slider = w.el("input", {
      type: "range", min: 0, max: sizes.length - 1, step: 1,
      value: sizes.indexOf(dHead), "data-option": "d_k",
    });
    slider.addEventListener("input", render);
    var shown = w.el("output", { class: "mha-dk" });
    var inputs = z.map(function (x, j) {
      var input = w.el("input", {
        type: "number", step: "any", value: String(x),
        "data-matrix": "z", "data-col": j,
      });
      input.addEventListener("input", render);
      return w.labelled("key " + j + ", z", input);
    });
    var results = w.el("div", { class: "mha-results" });
    var status = w.status();

    root.append(
      w.caption("Key j's raw score is z\u00b7\u221ad_k: a dot product " +
                "of d_k terms of variance 1 has standard deviation " +
                "\u221ad_k, and z says how many of those the key lies " +
                "above 0 (below, if negative)."),
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
      var root_d = Math.sqrt(d);
      slider.setAttribute("aria-valuetext", "d_k = " + d);
      shown.textContent = "d_k = " + d + ", \u221ad_k = " +
        w.format(root_d, 4);
      shown.setAttribute("data-value", String(d));
      results.textContent = "";
      var keys = z.map(function (_, j) {
        return "key " + j;
      });
      var made;
      try {
        var zs = inputs.map(function (label, j) {
          var x = w.readNumber(label.querySelector("input"));
          if (!isFinite(x)) {
            throw new RangeError("z of key " + j + " must be a number");
          }
          return x;
        });
        // q . k = z sqrt(d_k): one standard deviation per unit of z
        var raw = zs.map(function (x) {
          return x * root_d;
        });
        raw.forEach(function (s, j) {
          if (!isFinite(s)) {
            throw new RangeError("key " + j + "'s raw score z\u00b7\u221a" +
                                 d + " is beyond float64: use a smaller z");
          }
        });
        // S = q . k / sqrt(d_k)
        var scaled = raw.map(function (s) {
          return s / root_d;
        });
        var unscaledW = window.mhaRef.softmaxRows([raw])[0];
        var scaledW = window.mhaRef.softmaxRows([scaled])[0];
        var opts = { rowHeads: ["scores", "weights"], colHeads: keys,
                     digits: 4 };
        made = {
          nodes: [
            w.el("div", { class: "mha-pair" }, [
              w.numberTable("unscaled", "Unscaled: q\u00b7k",
                            [raw, unscaledW], opts),
              bars("unscaled weights", unscaledW, keys),
            ]),
            w.el("div", { class: "mha-pair" }, [
              w.numberTable("scaled", "Scaled: q\u00b7k / \u221ad_k",
                            [scaled, scaledW], opts),
              bars("scaled weights", scaledW, keys),
            ]),
          ],
          smallest: [Math.min.apply(null, unscaledW),
                     Math.min.apply(null, scaledW)],
        };
      } catch (error) {
        status.textContent = error.message;
        return;
      }
      results.append.apply(results, made.nodes);
      status.textContent = (notes[d] ? notes[d] + " " : "") +
        "Smallest weight: " + w.format(made.smallest[0], 4) +
        " unscaled, " + w.format(made.smallest[1], 4) + " scaled.";
    }

    render();
  };
})();
