// Small DOM helpers shared by the controls (control-*.js), and the
// registry they add themselves to; controls.js builds them on each page.
//
// Every number a control shows is a cell with its full value in
// data-value (String(x) round-trips a float64), so a test can read it
// exactly while the reader sees it rounded.
(function () {
  "use strict";

  // el("td", {class: "x", "data-value": 1}, [child, "text"])
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      var value = attrs[name];
      if (value === false || value === null || value === undefined) {
        return;
      }
      if (name === "text") {
        node.textContent = value;
      } else {
        node.setAttribute(name, value === true ? "" : String(value));
      }
    });
    (children || []).forEach(function (child) {
      node.append(child);
    });
    return node;
  }

  // 0.8807970779778823 -> "0.881", 1.125e-7 -> "1.13e-7", 10 -> "10";
  // `fixed` keeps the trailing zeros: 0.33 -> "0.330", 0 -> "0.000"
  function format(x, digits, fixed) {
    var places = digits === undefined ? 3 : digits;
    if (x === 0) {
      return fixed ? (0).toFixed(places) : "0";
    }
    if (!fixed && Math.abs(x) < Math.pow(10, -places)) {
      return x.toExponential(2).replace("e-", "e\u2212");
    }
    var text = x.toFixed(places);
    if (!fixed && text.indexOf(".") >= 0) {
      text = text.replace(/0+$/, "").replace(/\.$/, "");
    }
    if (/^-0\.?0*$/.test(text)) {
      text = text.slice(1);  // a value rounded to zero reads as zero
    }
    return text.replace("-", "\u2212");
  }

  // A table of numbers: rows x columns, with optional headers and a
  // blocked[i][j] mask (shown as a hatched 0). `role` names it for tests.
  // opts.corner names the row and column headers ("query \ key"), in the
  // top-left cell. A number that is not finite is refused (RangeError):
  // a control shows a message, never NaN or Infinity.
  function numberTable(role, caption, rows, opts) {
    var o = opts || {};
    rows.forEach(function (row, i) {
      row.forEach(function (x, j) {
        if (typeof x !== "number" || !isFinite(x)) {
          throw new RangeError(caption + ": row " + i + ", column " + j +
                               " is " + x + ", beyond float64");
        }
      });
    });
    // with no name for the headers the corner is an empty data cell: an
    // empty header would be a header of nothing
    var corner = o.corner
      ? el("th", { scope: "col", class: "mha-corner", text: o.corner })
      : el("td", { class: "mha-corner" });
    var head = o.colHeads
      ? [el("thead", {}, [el("tr", {}, [corner].concat(
          o.colHeads.map(function (h) {
            return el("th", { scope: "col", text: h });
          })
        ))])]
      : [];
    var body = el("tbody", {}, rows.map(function (row, i) {
      var cells = row.map(function (x, j) {
        var blocked = o.blocked && o.blocked[i][j];
        return el("td", {
          "data-value": String(x),
          class: blocked ? "mha-blocked" : null,
          title: blocked ? "blocked" : null,
          text: format(x, o.digits, o.fixed),
        });
      });
      var th = el("th", {
        scope: "row", text: o.rowHeads ? o.rowHeads[i] : "",
      });
      return el("tr", {}, [th].concat(cells));
    }));
    var table = el("table", { "data-role": role }, [
      el("caption", { text: caption }),
    ].concat(head, [body]));
    return el("div", { class: "mha-scroll" }, [table]);
  }

  // A grid of number inputs for a matrix; returns {node, read()}.
  // read() gives the numbers (NaN where a box holds no number).
  function matrixInput(name, rows, onInput) {
    var inputs = [];
    var body = el("tbody", {}, rows.map(function (row, i) {
      var cells = row.map(function (x, j) {
        var input = el("input", {
          type: "number",
          step: "any",
          value: String(x),
          "data-matrix": name,
          "data-row": i,
          "data-col": j,
          "aria-label": name + " row " + i + ", column " + j,
        });
        input.addEventListener("input", onInput);
        inputs.push(input);
        return el("td", {}, [input]);
      });
      // rows are positions, counted from 0 as in the code
      return el("tr", {}, [el("th", { scope: "row", text: i })]
        .concat(cells));
    }));
    var table = el("table", { class: "mha-inputs" }, [
      el("caption", { text: name }),
      body,
    ]);
    return {
      node: el("div", { class: "mha-scroll" }, [table]),
      inputs: inputs,
      read: function () {
        return rows.map(function (row, i) {
          return row.map(function (_, j) {
            return readNumber(inputs[i * row.length + j]);
          });
        });
      },
      set: function (values) {
        inputs.forEach(function (input, n) {
          var i = Math.floor(n / rows[0].length);
          input.value = String(values[i][n % rows[0].length]);
        });
      },
    };
  }

  function readNumber(input) {
    return input.value.trim() === "" ? NaN : Number(input.value);
  }

  // The whole number in `input` when it lies in [lo, hi], else null
  // (1.5, 1e400, an empty box, text). Number inputs accept 1.5 unless
  // told otherwise, so a control that says "whole number" checks here.
  function readWhole(input, lo, hi) {
    var x = readNumber(input);
    return Number.isInteger(x) && x >= lo && x <= hi ? x : null;
  }

  // What a whole number in [lo, hi] must be, said as a reader reads
  // it: "must be 1" when there is one choice, never "from 1 to 1".
  function wholeRule(what, lo, hi) {
    if (lo === hi) {
      return what + " must be " + lo;
    }
    return what + " must be a whole number from " + lo + " to " + hi;
  }

  // <label>text <input ...></label>
  function labelled(text, input) {
    return el("label", { class: "mha-field" }, [
      el("span", { text: text }),
      input,
    ]);
  }

  // The JSON in a data- attribute of the control's <div>.
  function data(root, name) {
    var raw = root.getAttribute("data-" + name);
    if (raw === null) {
      throw new Error("the control has no data-" + name + " attribute");
    }
    return JSON.parse(raw);
  }

  // A live line for messages (errors, what the reader is looking at).
  function status() {
    return el("p", { class: "mha-status", role: "status",
                     "aria-live": "polite" });
  }

  // The line that opens a control: what it shows, and how it counts.
  // Every control counts positions (queries, keys, values) from 0, as
  // the code does.
  var COUNTING = "Positions count from 0, as in the code.";
  function caption(text) {
    return el("p", { class: "mha-caption", text: text + " " + COUNTING });
  }

  window.mhaWidgets = {
    el: el,
    format: format,
    numberTable: numberTable,
    matrixInput: matrixInput,
    readNumber: readNumber,
    readWhole: readWhole,
    wholeRule: wholeRule,
    labelled: labelled,
    data: data,
    status: status,
    caption: caption,
  };
  // control-*.js add a builder here: mhaControls["name"] = function (root)
  window.mhaControls = window.mhaControls || {};
})();
