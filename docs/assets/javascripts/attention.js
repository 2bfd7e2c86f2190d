// Attention computed in the page, for the interactive controls.
//
// The same steps as mha_ref.numpy_ref.attention, in float64 (a JavaScript
// number is a float64):
//   S = Q K^T / sqrt(d_k)        scores, one row per query
//   S[i][j] = -inf where blocked  mask: true = blocked
//   (scores that overflowed float64 are refused, as in mha_ref)
//   A = softmax over each row     subtract the row max, so exp() <= 1
//   O = A V                       output
// The browser tests (tests/browser/test_controls.py) feed it random
// inputs through window.mhaRef and compare with NumPy at 1e-12.
(function () {
  "use strict";

  function shape(a) {
    return "(" + a.length + ", " + (a.length ? a[0].length : 0) + ")";
  }

  function checkMatrix(a, name) {
    if (!Array.isArray(a) || a.length === 0) {
      throw new TypeError(name + " must be a non-empty list of rows");
    }
    a.forEach(function (row, i) {
      if (!Array.isArray(row) || row.length !== a[0].length) {
        throw new TypeError(name + " row " + i + " has another length");
      }
      row.forEach(function (x, j) {
        if (typeof x !== "number" || !isFinite(x)) {
          throw new RangeError(
            name + " row " + i + ", column " + j + " is not a finite number"
          );
        }
      });
    });
  }

  // A (n, m) @ B (m, p) -> (n, p)
  function matmul(a, b) {
    if (a[0].length !== b.length) {
      throw new RangeError("matmul: " + shape(a) + " @ " + shape(b));
    }
    return a.map(function (row) {
      return b[0].map(function (_, j) {
        var sum = 0;
        for (var m = 0; m < row.length; m++) {
          sum += row[m] * b[m][j];
        }
        return sum;
      });
    });
  }

  function transpose(a) {
    return a[0].map(function (_, j) {
      return a.map(function (row) {
        return row[j];
      });
    });
  }

  // Softmax of each row; -Infinity is a blocked key and gets weight 0.
  function softmaxRows(rows) {
    return rows.map(function (row, i) {
      var max = Math.max.apply(null, row);
      if (max === -Infinity) {
        throw new RangeError(
          "row " + i + " has every key blocked: no denominator"
        );
      }
      // subtracting the row max leaves the weights as they are
      var e = row.map(function (x) {
        return Math.exp(x - max);
      });
      var total = e.reduce(function (s, x) {
        return s + x;
      }, 0);
      return e.map(function (x) {
        return x / total;
      });
    });
  }

  // Refuse scores that overflowed, as mha_ref.checks.scores_finite does:
  // finite inputs of about 1e154 or more make q . k beyond float64 (NaN
  // or +Infinity, or a row of -Infinity where the mask left a key).
  function scoresFinite(masked, mask) {
    masked.forEach(function (row, i) {
      row.forEach(function (x, j) {
        if (isNaN(x) || x === Infinity) {
          throw new RangeError(
            "score row " + i + ", column " + j + " is " + x + ": q \u00b7 k " +
              "overflowed float64 though Q and K are finite; use smaller " +
              "numbers (below about 1e154)"
          );
        }
      });
      var lost = row.every(function (x) {
        return x === -Infinity;
      });
      var open = !mask || mask[i].some(function (blocked) {
        return !blocked;
      });
      if (lost && open) {
        throw new RangeError(
          "every score of row " + i + " is -Infinity though the mask " +
            "leaves it a key: q \u00b7 k overflowed float64; use smaller " +
            "numbers (below about 1e154)"
        );
      }
    });
  }

  // q (Tq, d), k (Tk, d), v (Tk, dv), mask (Tq, Tk) or null, true = blocked.
  // divisor: what the scores are divided by, sqrt(d) unless given.
  function attention(q, k, v, mask, divisor) {
    checkMatrix(q, "Q");
    checkMatrix(k, "K");
    checkMatrix(v, "V");
    if (q[0].length !== k[0].length || k.length !== v.length) {
      throw new RangeError(
        "Q " + shape(q) + ", K " + shape(k) + ", V " + shape(v) +
          ": Q and K need the same width, K and V the same rows"
      );
    }
    var d = q[0].length;
    var by = divisor === undefined ? Math.sqrt(d) : divisor;
    // S = Q K^T / sqrt(d_k), (Tq, Tk)
    var scores = matmul(q, transpose(k)).map(function (row) {
      return row.map(function (x) {
        return x / by;
      });
    });
    var masked = scores;
    if (mask) {
      if (mask.length !== q.length || mask[0].length !== k.length) {
        throw new RangeError(
          "mask " + shape(mask) + " must be (" + q.length + ", " +
            k.length + ")"
        );
      }
      masked = scores.map(function (row, i) {
        return row.map(function (x, j) {
          return mask[i][j] ? -Infinity : x;
        });
      });
    }
    scoresFinite(masked, mask);
    var weights = softmaxRows(masked); // each row sums to 1
    return { scores: scores, weights: weights, output: matmul(weights, v) };
  }

  // (t, t), true strictly above the diagonal: the future.
  function causalMask(t) {
    return positionMask(range(0, t), range(0, t));
  }

  // true where a key's position is later than the query's.
  function positionMask(queryPositions, keyPositions) {
    return queryPositions.map(function (p) {
      return keyPositions.map(function (kp) {
        return kp > p;
      });
    });
  }

  function range(start, stop) {
    var out = [];
    for (var i = start; i < stop; i++) {
      out.push(i);
    }
    return out;
  }

  window.mhaRef = {
    attention: attention,
    softmaxRows: softmaxRows,
    matmul: matmul,
    transpose: transpose,
    causalMask: causalMask,
    positionMask: positionMask,
    range: range,
  };
})();
