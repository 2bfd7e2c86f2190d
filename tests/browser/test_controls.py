"""The interactive controls show what mha_ref computes.

Three pages carry a control whose JavaScript (docs/assets/javascripts/
attention.js) computes attention in the reader's browser. Each test
types random inputs into a control's own widgets, reads back every number
it displays (each cell keeps its full float64 value in data-value, and
its rounded text must agree with it), and compares them with
mha_ref.numpy_ref in float64 at 1e-12. The first state of each control
is the page's generated example. A drifted case (a wrong scale injected
through the window.mhaRef hook) shows the comparison fails.
"""

import itertools
import re

import numpy as np
import pagecheck
import pytest
from harness import PHONE

from mha_ref import numpy_ref

pytestmark = pytest.mark.browser

TOL = 1e-12  # float64 in both: only the order of the sums may differ
TRIALS = 4
PAGES = {
    "attention-matrix": "attention-matrix/",
    "scaling": "scaling/",
    "kv-cache": "kv-cache/",
}

# Every number of a result table: [[{value, text, blocked}, ...], ...].
_READ_TABLE = """([root, role]) => {
  const table = document.querySelector(
    `[data-control="${root}"] table[data-role="${role}"]`);
  if (!table) return null;
  return [...table.querySelectorAll("tbody tr")].map(tr =>
    [...tr.querySelectorAll("td")].map(td => ({
      value: td.dataset.value, text: td.textContent,
      blocked: td.classList.contains("mha-blocked")})));
}"""


def mismatches(name, shown, expected, tol=TOL):
    """One line per entry where shown and expected differ by more than
    tol (relative to the larger of 1 and the expected magnitude)."""
    shown, expected = np.asarray(shown), np.asarray(expected)
    if shown.shape != expected.shape:
        return [
            f"{name}: shows shape {shown.shape}, mha_ref gives "
            f"{expected.shape}"
        ]
    close = np.abs(shown - expected) <= tol * np.maximum(1, np.abs(expected))
    far = ~close  # NaN is never close
    return [
        f"{name}{[int(n) for n in i]}: shows {float(shown[i])!r}, "
        f"mha_ref gives {float(expected[i])!r}"
        for i in map(tuple, np.argwhere(far))
    ]


def rounding_problems(name, cells):
    """The rounded text of each cell must be its data-value, rounded."""
    problems = []
    for i, row in enumerate(cells):
        for j, cell in enumerate(row):
            text = cell["text"].replace("\u2212", "-")
            mantissa = text.split("e")[0]
            places = len(mantissa.split(".")[1]) if "." in mantissa else 0
            exponent = int(text.split("e")[1]) if "e" in text else 0
            half = 0.5 * 10.0 ** (exponent - places)
            error = abs(float(text) - float(cell["value"]))
            if not error <= half * (1 + 1e-9):  # NaN is never close
                problems.append(
                    f"{name}[{i}, {j}]: text {cell['text']!r} "
                    f"is not {cell['value']} rounded"
                )
    return problems


def read_table(page, control, role):
    """(values, blocked, problems) of the table `role` of `control`."""
    cells = page.evaluate(_READ_TABLE, [control, role])
    if cells is None:
        status = page.locator(f'[data-control="{control}"] .mha-status')
        return (
            None,
            None,
            [f"{control}: no {role} table shown ({status.text_content()!r})"],
        )
    values = np.array([[float(c["value"]) for c in row] for row in cells])
    blocked = np.array([[c["blocked"] for c in row] for row in cells])
    return values, blocked, rounding_problems(f"{control} {role}", cells)


def open_control(open_page, origin, name, viewport=None):
    """The page of control `name`, loaded, with the control built."""
    page, recorder = open_page(origin, viewport=viewport)
    page.goto(f"{origin}/{PAGES[name]}", wait_until="load")
    page.wait_for_selector(
        f'[data-control="{name}"][data-ready]', timeout=pagecheck.WAIT_MS
    )
    return page, recorder


def control_data(page, name, attribute):
    """The generated example the page put in a data- attribute."""
    return page.evaluate(
        "([n, a]) => JSON.parse(document.querySelector("
        '`[data-control="${n}"]`).getAttribute(`data-${a}`))',
        [name, attribute],
    )


def fill(page, selector, value):
    page.locator(selector).fill(repr(float(value)))


# What Playwright's fill does to one input (its text set, an input event,
# which the controls redraw on), done to many in one round trip.
_FILL_ALL = """pairs => {
  for (const [selector, text] of pairs) {
    const input = document.querySelector(selector);
    if (!input) throw new Error(`no input ${selector}`);
    input.value = text;
    input.dispatchEvent(new Event("input", {bubbles: true}));
  }
}"""


def fill_all(page, values):
    """Fill each input of {selector: number} (one evaluate for all)."""
    page.evaluate(
        _FILL_ALL, [[sel, repr(float(x))] for sel, x in values.items()]
    )


# -- the attention matrix: Q, K, V, the causal mask and key padding ------


def matrix_mask(t, causal, padding):
    """The mask the control builds: causal and/or the last keys."""
    mask = numpy_ref.causal_mask(t) if causal else np.zeros((t, t), bool)
    mask[:, t - padding :] = padding > 0  # the last `padding` keys
    return mask


def matrix_problems(page, q, k, v, mask):
    """Compare the attention-matrix control with numpy_ref.attention."""
    output, weights = numpy_ref.attention(q, k, v, mask)
    shown_w, blocked, problems = read_table(
        page, "attention-matrix", "weights"
    )
    shown_o, _, more = read_table(page, "attention-matrix", "output")
    problems += more
    if shown_w is None or shown_o is None:
        return problems
    problems += mismatches("weights", shown_w, weights)
    problems += mismatches("output", shown_o, output)
    if not np.array_equal(blocked, mask):
        problems.append(
            f"hatched cells {blocked.tolist()} are not the "
            f"mask {mask.tolist()}"
        )
    return problems


def set_matrix_inputs(page, q, k, v, causal, padding):
    root = '[data-control="attention-matrix"]'
    fill_all(
        page,
        {
            f'{root} input[data-matrix="{name}"][data-row="{i}"]'
            f'[data-col="{j}"]': x
            for name, matrix in (("Q", q), ("K", k), ("V", v))
            for (i, j), x in np.ndenumerate(matrix)
        },
    )
    page.locator(f'{root} input[data-option="causal"]').set_checked(causal)
    page.locator(f'{root} input[data-option="padding"]').fill(str(padding))


def example_qkv(page):
    return [
        np.array(control_data(page, "attention-matrix", name))
        for name in ("q", "k", "v")
    ]


def test_attention_matrix_control_matches_numpy_ref(site_origin, open_page):
    page, recorder = open_control(open_page, site_origin, "attention-matrix")
    q, k, v = example_qkv(page)
    t = len(k)
    mask = np.array(control_data(page, "attention-matrix", "mask"))
    problems = [
        f"page's example: {p}" for p in matrix_problems(page, q, k, v, mask)
    ]
    rng = np.random.default_rng(12)
    for trial in range(TRIALS):
        q, k, v = (
            rng.normal(scale=2.0, size=a.shape) for a in example_qkv(page)
        )
        causal = bool(trial % 2)
        padding = int(rng.integers(0, t))  # 0 .. t-1 keys blocked
        set_matrix_inputs(page, q, k, v, causal, padding)
        mask = matrix_mask(t, causal, padding)
        problems += [
            f"trial {trial} (causal={causal}, padding={padding}): {p}"
            for p in matrix_problems(page, q, k, v, mask)
        ]
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_attention_matrix_control_fails_with_a_wrong_scale(
    site_origin, open_page
):
    """Drifted: the JS divides by d_k instead of sqrt(d_k); caught."""
    page, _ = open_control(open_page, site_origin, "attention-matrix")
    q, k, v = example_qkv(page)
    mask = np.array(control_data(page, "attention-matrix", "mask"))
    assert not matrix_problems(page, q, k, v, mask)
    page.evaluate("""() => {
      const right = window.mhaRef.attention;
      window.mhaRef.attention = (q, k, v, mask) =>
        right(q, k, v, mask, q[0].length);  // d_k, not sqrt(d_k)
    }""")
    fill(
        page,
        '[data-control="attention-matrix"] input[data-matrix="Q"]'
        '[data-row="1"][data-col="1"]',
        q[1, 1],
    )  # redraw
    problems = matrix_problems(page, q, k, v, mask)
    assert any(p.startswith("weights[") for p in problems), problems
    assert any(p.startswith("output[") for p in problems), problems


# -- scaling: raw scores z*sqrt(d_k) grow with the head size -------------


def scaling_problems(page, z):
    """Compare the scaling control with numpy_ref.softmax, at its d_k.

    The raw scores are z * sqrt(d_k), one standard deviation of a d_k-term
    dot product per unit of z: unscaled, their softmax; scaled, the same
    divided by sqrt(d_k).
    """
    root = '[data-control="scaling"]'
    d = int(page.locator(f"{root} output").get_attribute("data-value"))
    raw = np.asarray(z) * np.sqrt(d)
    scaled = raw / np.sqrt(d)
    problems = []
    for role, scores in (("unscaled", raw), ("scaled", scaled)):
        shown, _, more = read_table(page, "scaling", role)
        problems += more
        if shown is None:
            continue
        problems += mismatches(f"d_k={d} {role} scores", shown[0], scores)
        problems += mismatches(
            f"d_k={d} {role} weights", shown[1], numpy_ref.softmax(scores)
        )
    return problems


def test_scaling_control_matches_numpy_ref(site_origin, open_page):
    page, recorder = open_control(open_page, site_origin, "scaling")
    root = '[data-control="scaling"]'
    scores = np.array(control_data(page, "scaling", "scores"))
    d_head = control_data(page, "scaling", "d-head")
    z = scores / np.sqrt(d_head)  # the page's scores belong to d_head
    slider = page.locator(f'{root} input[data-option="d_k"]')
    shown_d = page.locator(f"{root} output")
    problems = []
    if int(shown_d.get_attribute("data-value")) != d_head:
        problems.append(
            f"starts at d_k={shown_d.get_attribute('data-value')}"
            f", not the page's {d_head}"
        )
    problems += scaling_problems(page, z)
    unscaled, _, _ = read_table(page, "scaling", "unscaled")
    if unscaled is not None:  # the page's own example: [8, -8] raw
        problems += mismatches("page's raw scores", unscaled[0], scores)
    # with the keyboard: Home is d_k = 1 (no scaling), then each step
    slider.focus()
    page.keyboard.press("Home")
    steps = int(slider.get_attribute("max"))
    rng = np.random.default_rng(3)
    for step in range(steps + 1):
        if step % 3 == 1:  # new random z now and then, some of them
            # large: exp(5000) overflows unless the max is subtracted
            offset = 5000.0 if step % 2 else 0.0
            z = offset + rng.normal(scale=3.0, size=z.shape)
            fill_all(
                page,
                {f'{root} input[data-col="{j}"]': x for j, x in enumerate(z)},
            )
        problems += scaling_problems(page, z)
        slider.press("ArrowRight")
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_scaling_control_unscaled_sharpens_scaled_stays(
    site_origin, open_page
):
    """What the control teaches, on the page's own scores: as d_k grows,
    the unscaled smallest weight falls, the scaled weights do not move."""
    page, _ = open_control(open_page, site_origin, "scaling")
    slider = page.locator('[data-control="scaling"] input[data-option="d_k"]')
    slider.focus()
    page.keyboard.press("Home")
    unscaled, scaled = [], []
    for _ in range(int(slider.get_attribute("max")) + 1):
        unscaled.append(read_table(page, "scaling", "unscaled")[0][1])
        scaled.append(read_table(page, "scaling", "scaled")[0][1])
        slider.press("ArrowRight")
    smallest = [row.min() for row in unscaled]
    assert all(b < a for a, b in itertools.pairwise(smallest)), smallest
    assert np.allclose(scaled, scaled[0], rtol=0, atol=1e-15), scaled


# -- the KV cache: cache length, new queries, the two masks --------------


def kv_expected(values, cache, fresh, which):
    """numpy_ref.attention on the zero-score example."""
    keys = range(cache + fresh)
    first = cache if which == "aligned" else 0  # upper-left: from 0
    mask = numpy_ref.causal_mask_for_positions(
        range(first, first + fresh), keys
    )
    v = np.asarray(values[: cache + fresh], float)[:, None]  # (T, 1)
    q, k = np.zeros((fresh, 1)), np.zeros((cache + fresh, 1))
    output, weights = numpy_ref.attention(q, k, v, mask)
    return output, weights, mask


def kv_problems(page, values, cache, fresh, which):
    output, weights, mask = kv_expected(values, cache, fresh, which)
    shown_w, blocked, problems = read_table(page, "kv-cache", "weights")
    shown_o, _, more = read_table(page, "kv-cache", "output")
    problems += more
    if shown_w is None or shown_o is None:
        return problems
    where = f"cache={cache}, new={fresh}, {which}"
    problems += mismatches(f"{where} weights", shown_w, weights)
    problems += mismatches(f"{where} output", shown_o, output)
    if not np.array_equal(blocked, mask):
        problems.append(
            f"{where}: hatched {blocked.tolist()} is not the "
            f"mask {mask.tolist()}"
        )
    return problems


def set_kv_inputs(page, values, cache, fresh, which):
    root = '[data-control="kv-cache"]'
    fill_all(
        page,
        {
            f'{root} input[data-matrix="values"][data-row="{j}"]': x
            for j, x in enumerate(values)
        },
    )
    page.locator(f'{root} input[data-option="new"]').fill("1")
    page.locator(f'{root} input[data-option="cache"]').fill(str(cache))
    page.locator(f'{root} input[data-option="new"]').fill(str(fresh))
    page.locator(f'{root} input[value="{which}"]').check()


def test_kv_cache_control_matches_numpy_ref(site_origin, open_page):
    page, recorder = open_control(open_page, site_origin, "kv-cache")
    values = control_data(page, "kv-cache", "values")
    positions = control_data(page, "kv-cache", "query-positions")
    cache, fresh = positions[0], len(positions)
    problems = kv_problems(page, values, cache, fresh, "aligned")
    # the page's wrong answer, [10, 15] for values 10 .. 50
    page.locator('[data-control="kv-cache"] input[value="upper-left"]').check()
    problems += kv_problems(page, values, cache, fresh, "upper-left")
    rng = np.random.default_rng(7)
    n = len(values)
    for trial in range(TRIALS):
        values = rng.normal(scale=20.0, size=n)
        cache = int(rng.integers(0, n))
        fresh = int(rng.integers(1, n - cache + 1))
        which = ("aligned", "upper-left")[trial % 2]
        set_kv_inputs(page, values, cache, fresh, which)
        problems += kv_problems(page, values, cache, fresh, which)
    # equal values hide the masks' difference, and the status says so even
    # where the two sums round differently (5 x 7/5 is 7.000000000000001)
    set_kv_inputs(page, [7.0] * n, 3, 2, "aligned")
    status = page.locator('[data-control="kv-cache"] .mha-status')
    if "these values hide the difference" not in status.text_content():
        problems.append(f"equal values: status {status.text_content()!r}")
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_kv_cache_control_shows_the_wrong_upper_left_answer(
    site_origin, open_page
):
    """Upper-left on the page's example shows the page's wrong output."""
    page, _ = open_control(open_page, site_origin, "kv-cache")
    values = control_data(page, "kv-cache", "values")
    positions = control_data(page, "kv-cache", "query-positions")
    page.locator('[data-control="kv-cache"] input[value="upper-left"]').check()
    shown, _, problems = read_table(page, "kv-cache", "output")
    assert not problems, problems
    # row i of the upper-left mask reads the first i + 1 values
    means = [np.mean(values[: i + 1]) for i in range(len(positions))]
    assert shown[:, 0].tolist() == means


# -- the JavaScript itself, through its hook -----------------------------


def test_attention_js_matches_numpy_ref_on_random_shapes(
    site_origin, open_page
):
    page, _ = open_control(open_page, site_origin, "attention-matrix")
    rng = np.random.default_rng(0)
    problems = []
    for case in range(20):
        tq, tk, d, dv = rng.integers(1, 7, size=4)
        q, k = rng.normal(size=(tq, d)), rng.normal(size=(tk, d))
        v = rng.normal(size=(tk, dv))
        mask = rng.random((tq, tk)) < 0.4
        mask[np.arange(tq), rng.integers(0, tk, size=tq)] = False
        got = page.evaluate(
            "([q, k, v, m]) => window.mhaRef.attention(q, k, v, m)",
            [q.tolist(), k.tolist(), v.tolist(), mask.tolist()],
        )
        output, weights = numpy_ref.attention(q, k, v, mask)
        problems += mismatches(
            f"case {case} weights", np.array(got["weights"]), weights
        )
        problems += mismatches(
            f"case {case} output", np.array(got["output"]), output
        )
    assert not problems, "\n".join(problems)


def test_attention_js_refuses_overflowing_scores_as_numpy_ref_does(
    site_origin, open_page
):
    """Finite inputs whose q . k overflows: both refuse, neither NaNs."""
    page, _ = open_control(open_page, site_origin, "attention-matrix")
    cases = {
        "+inf": ([[1e200]], [[1e200], [1.0]]),
        "-inf row": ([[1e200]], [[-1e200]]),
    }
    for what, (q, k) in cases.items():
        v = [[1.0]] * len(k)
        with (
            np.errstate(over="ignore"),
            pytest.raises(ValueError, match="overflowed"),
        ):
            numpy_ref.attention(np.array(q), np.array(k), np.array(v))
        message = page.evaluate(
            """([q, k, v]) => {
              try { window.mhaRef.attention(q, k, v, null); }
              catch (error) { return error.message; }
              return null;
            }""",
            [q, k, v],
        )
        assert message is not None, what
        assert "overflowed" in message, (what, message)


def test_attention_js_refuses_a_row_with_every_key_blocked(
    site_origin, open_page
):
    page, _ = open_control(open_page, site_origin, "attention-matrix")
    message = page.evaluate("""() => {
      try {
        window.mhaRef.attention([[1]], [[1], [2]], [[1], [2]],
                                [[true, true]]);
      } catch (error) { return error.message; }
      return null;
    }""")
    assert message is not None
    assert "row 0" in message


# -- a reader's use: phone, keyboard, instant navigation -----------------


# Every box of a control that holds a table: whether it is cut (scrolls),
# and where each blocked cell sits against the screen.
_BOXES = """name => {
  const root = document.querySelector(`[data-control="${name}"]`);
  const vw = document.documentElement.clientWidth;
  return [...root.querySelectorAll(".mha-scroll")].map(box => {
    const r = box.getBoundingClientRect();
    return {
      table: box.querySelector("caption")?.textContent || "",
      cut: box.scrollWidth > box.clientWidth + 1,
      hidden: [...box.querySelectorAll("td.mha-blocked")].filter(td => {
        const c = td.getBoundingClientRect();
        return c.right > Math.min(r.right, vw) + 1 || c.left < r.left - 1;
      }).length,
    };
  });
}"""


@pytest.mark.parametrize("name", sorted(PAGES))
def test_control_fits_a_phone(name, site_origin, open_page):
    """At 390 px a control and every table in it fit: nothing, the
    blocked cells least of all, hides behind a sideways scroll."""
    page, recorder = open_control(open_page, site_origin, name, viewport=PHONE)
    problems = pagecheck.overflow_problems(page)
    box = page.locator(f'[data-control="{name}"]').bounding_box()
    if box["x"] < 0 or box["x"] + box["width"] > PHONE["width"]:
        problems.append(
            f"the control spans {box['x']:.0f} to "
            f"{box['x'] + box['width']:.0f}px"
        )
    for table in page.evaluate(_BOXES, name):
        if table["cut"]:
            problems.append(f"{table['table']!r} is wider than its box")
        if table["hidden"]:
            problems.append(
                f"{table['table']!r}: {table['hidden']} blocked cell(s) "
                "off the screen"
            )
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_control_says_it_counts_from_zero(name, site_origin, open_page):
    """One convention: positions count from 0 (as the code does), the
    control's first line says so, and its headers start at 0."""
    page, _ = open_control(open_page, site_origin, name)
    root = page.locator(f'[data-control="{name}"]')
    caption = root.locator(".mha-caption").text_content()
    assert "count from 0" in caption, caption
    heads = root.locator("table:not(.mha-inputs) thead th").all_text_contents()
    heads += root.locator("label.mha-field > span").all_text_contents()
    numbers = [int(n) for h in heads for n in re.findall(r"\d+", h)]
    assert 0 in numbers, heads  # key 0, v0, ... never key 1 first
    rows = root.locator("table.mha-inputs tbody th").all_text_contents()
    assert not rows or rows[0] == "0", rows


# Out of range: typed into a control, each gets a message in the status
# line and no result table, never a NaN or an Infinity on the screen.
OUT_OF_RANGE = {
    "attention-matrix": [
        # finite inputs whose dot product overflows float64
        (
            {
                'input[data-matrix="Q"][data-row="0"][data-col="0"]': "1e200",
                'input[data-matrix="K"][data-row="0"][data-col="0"]': "1e200",
            },
            "overflowed",
        ),
        (
            {'input[data-matrix="V"][data-row="1"][data-col="0"]': "1e400"},
            "not a finite number",
        ),
        (
            {'input[data-matrix="K"][data-row="2"][data-col="1"]': ""},
            "not a finite number",
        ),
        ({'input[data-option="padding"]': "9"}, "whole number"),
        # a number box takes 1.5; a whole number it is not
        ({'input[data-option="padding"]': "1.5"}, "whole number"),
    ],
    "scaling": [
        ({'input[data-col="0"]': "1e308"}, "beyond float64"),
        ({'input[data-col="1"]': ""}, "must be a number"),
    ],
    "kv-cache": [
        (
            {'input[data-matrix="values"][data-row="2"]': "1e400"},
            "not a finite number",
        ),
        ({'input[data-option="cache"]': "7"}, "whole number"),
        ({'input[data-option="cache"]': "2.5"}, "whole number"),
        ({'input[data-option="new"]': "0"}, "whole number"),
        ({'input[data-option="new"]': "1.5"}, "whole number"),
        # one choice left (5 values, 4 cached): "must be 1", not the
        # "whole number from 1 to 1" it said
        (
            {
                'input[data-option="cache"]': "4",
                'input[data-option="new"]': "2",
            },
            "New queries must be 1:",
        ),
    ],
}


# Every input of a control as a reader left it, and putting them back as
# a reader would type them (an input event, and a change event for boxes).
_INPUTS = """root => [...document.querySelectorAll(`${root} input`)].map(
  i => i.type === "checkbox" || i.type === "radio" ? i.checked : i.value)"""
_PUT_BACK = """([root, values]) => {
  document.querySelectorAll(`${root} input`).forEach((input, n) => {
    const box = input.type === "checkbox" || input.type === "radio";
    if ((box ? input.checked : input.value) === values[n]) return;
    if (box) input.checked = values[n]; else input.value = values[n];
    input.dispatchEvent(new Event("input", {bubbles: true}));
    input.dispatchEvent(new Event("change", {bubbles: true}));
  });
}"""


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_control_refuses_out_of_range_inputs(name, site_origin, open_page):
    """Each bad input is refused in words, and putting the inputs back
    shows the results again (no reload: the control recovers)."""
    page, recorder = open_control(open_page, site_origin, name)
    root = f'[data-control="{name}"]'
    start = page.evaluate(_INPUTS, root)
    problems = []
    for inputs, expected in OUT_OF_RANGE[name]:
        page.evaluate(_PUT_BACK, [root, start])
        if not page.locator(f"{root} .mha-results").text_content().strip():
            problems.append(f"{name}: no results after the inputs are back")
        if name == "scaling":  # the largest d_k: z * sqrt(d_k) overflows
            page.locator(f'{root} input[data-option="d_k"]').press("End")
        for selector, text in inputs.items():
            page.locator(f"{root} {selector}").fill(text)
        status = page.locator(f"{root} .mha-status").text_content()
        shown = page.locator(f"{root} .mha-results").text_content()
        where = f"{name} {inputs}"
        if expected not in status:
            problems.append(f"{where}: status {status!r} lacks {expected!r}")
        if re.search(r"from (-?\d+) to \1\b", status):
            problems.append(f"{where}: a range of one value: {status!r}")
        if shown.strip():
            problems.append(f"{where}: still shows {shown[:60]!r}")
        text = page.locator(root).text_content()
        for bad in ("NaN", "Infinity"):
            if bad in text.replace(status, ""):
                problems.append(f"{where}: shows {bad}")
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_control_inputs_are_labelled_and_show_focus(
    name, site_origin, open_page
):
    page, _ = open_control(open_page, site_origin, name)
    found = page.evaluate(
        """name => {
      const root = document.querySelector(`[data-control="${name}"]`);
      const fields = [...root.querySelectorAll("input, button")];
      return fields.map(el => {
        el.focus();
        const s = getComputedStyle(el);
        return {
          what: el.outerHTML.slice(0, 60),
          named: Boolean(el.getAttribute("aria-label") ||
                         el.closest("label") || el.textContent.trim()),
          focused: document.activeElement === el,
          outline: s.outlineStyle !== "none" &&
                   parseFloat(s.outlineWidth) > 0,
        };
      });
    }""",
        name,
    )
    problems = [f"{f['what']}: no label" for f in found if not f["named"]]
    problems += [
        f"{f['what']}: cannot take focus" for f in found if not f["focused"]
    ]
    problems += [
        f"{f['what']}: no visible focus outline"
        for f in found
        if not f["outline"]
    ]
    assert found, f"no inputs or buttons in the {name} control"
    assert not problems, "\n".join(problems)


def test_controls_built_after_instant_navigation(site_origin, open_page):
    import harness

    page, recorder = open_page(site_origin)
    sitemap = harness.localize_sitemap(page.context, site_origin)
    page.goto(f"{site_origin}/{PAGES['scaling']}", wait_until="load")
    sitemap(page)
    page.evaluate("() => { window.__mhaNoReload = true }")
    url = f"{site_origin}/{PAGES['attention-matrix']}"
    page.locator(
        f'.md-nav--primary a.md-nav__link[href$="{PAGES["attention-matrix"]}"]'
    ).locator("visible=true").first.click()
    page.wait_for_url(url)
    page.wait_for_selector(
        '[data-control="attention-matrix"][data-ready]',
        timeout=pagecheck.WAIT_MS,
    )
    assert page.evaluate("() => window.__mhaNoReload === true"), (
        "full reload instead of instant navigation"
    )
    q, k, v = example_qkv(page)
    mask = np.array(control_data(page, "attention-matrix", "mask"))
    problems = matrix_problems(page, q, k, v, mask) + recorder.problems()
    assert not problems, "\n".join(problems)
