"""The trained-heads control shows what mha_ref.induction computes.

The page's control (docs/assets/javascripts/control-trained-heads.js)
runs the model the build trained, in the reader's browser, on the
weights the build exported (generated/exports/trained-heads.json,
float32). These tests type random sequences into it and switch random
heads off, read back every attention weight and every prediction it
shows, and compare them with mha_ref.induction's forward in float64 on
the same float32 weights, at 1e-6. A drifted case (a wrong scale
injected through window.mhaRef) shows the comparison fails.
"""

import base64
import json

import numpy as np
import pagecheck
import pytest
import torch
from harness import PHONE
from test_controls import mismatches, rounding_problems

from mha_ref import induction

pytestmark = pytest.mark.browser

TOL = 1e-6  # float64 in both, on the float32 weights the browser reads
TRIALS = 6
NAME = "trained-heads"
PATH = "trained-heads/"
ROOT = f'[data-control="{NAME}"]'

# Everything the control shows: each head's weights, the predictions.
_READ = """root => {
  const el = document.querySelector(root);
  const grids = {};
  for (const table of el.querySelectorAll('table[data-role="weights"]'))
    grids[table.dataset.head] = [...table.querySelectorAll("tbody tr")]
      .map(tr => [...tr.querySelectorAll("td")].map(td =>
        ({value: td.dataset.value, blocked:
          td.classList.contains("mha-blocked")})));
  const table = el.querySelector('table[data-role="predictions"]');
  const rows = table ? [...table.querySelectorAll("tbody tr")] : [];
  const cells = r => r ? [...r.querySelectorAll("td")] : [];
  return {
    grids,
    tokens: cells(rows[2]).map(td => td.dataset.token),
    probs: cells(rows[3]).map(td => ({value: td.dataset.value,
                                      text: td.textContent})),
    status: el.querySelector(".mha-status").textContent,
    text: el.textContent,
  };
}"""


@pytest.fixture(scope="module")
def exported(site_dir):
    """The exported weights as the browser reads them, and the model."""
    path = site_dir / "generated" / "exports" / f"{NAME}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run make site", pytrace=False)
    data = json.loads(path.read_text(encoding="utf-8"))
    arrays = {
        key: np.frombuffer(
            base64.b64decode(entry["float32"]), dtype="<f4"
        ).reshape(entry["shape"])
        for key, entry in data["weights"].items()
    }
    model = induction.from_arrays(arrays, data["n_head"], torch.float64)
    return data, model


def expected(model, tokens, keep):
    """float64 weights {name: (T, T)}, argmax letters and probabilities."""
    with torch.no_grad():
        logits, weights, _ = model(
            torch.tensor([tokens]), keep=torch.tensor(keep)
        )
    probs = logits[0].softmax(-1)  # (T, vocab)
    guess = probs.argmax(-1)
    return weights[:, 0], guess.tolist(), probs.max(-1).values.numpy()


def shown_problems(page, data, model, letters, keep):
    """Every weight and prediction the control shows vs mha_ref."""
    tokens = [data["letters"].index(c) for c in letters]
    weights, guess, best = expected(model, tokens, keep)
    shown = page.evaluate(_READ, ROOT)
    problems = []
    if "NaN" in shown["text"] or "Infinity" in shown["text"]:
        problems.append(f"{letters}: the control shows NaN or Infinity")
    n_head = data["n_head"]
    for index, name in enumerate(data["names"]):
        grid = shown["grids"].get(name)
        if grid is None:
            problems.append(f"{letters}: no weights shown for {name}")
            continue
        values = np.array([[float(c["value"]) for c in r] for r in grid])
        blocked = np.array([[c["blocked"] for c in r] for r in grid])
        w = weights[index // n_head, index % n_head].numpy()
        problems += mismatches(f"{letters} {name}", values, w, TOL)
        future = np.triu(np.ones((len(tokens),) * 2, bool), 1)
        if not np.array_equal(blocked, future):
            problems.append(
                f"{letters} {name}: hatched cells are not the causal mask"
            )
    letters_shown = [data["letters"].index(c) for c in shown["tokens"]]
    if letters_shown != guess:
        problems.append(
            f"{letters} keep={keep}: predicts {shown['tokens']}, mha_ref "
            f"{[data['letters'][g] for g in guess]}"
        )
    probs = [float(c["value"]) for c in shown["probs"]]
    problems += mismatches(f"{letters} probabilities", probs, best, TOL)
    problems += rounding_problems(f"{letters} probabilities", [shown["probs"]])
    return problems


def open_control(open_page, origin, viewport=None, path=PATH):
    """The page, loaded, with the control's results shown."""
    page, recorder = open_page(origin, viewport=viewport)
    page.goto(f"{origin}/{path}", wait_until="load")
    page.wait_for_selector(
        f'{ROOT} table[data-role="predictions"]', timeout=pagecheck.WAIT_MS
    )
    return page, recorder


def set_inputs(page, letters, keep, names, n_head):
    for index, name in enumerate(names):
        box = page.locator(f'{ROOT} input[data-head="{name}"]')
        box.set_checked(bool(keep[index // n_head][index % n_head]))
    page.locator(f'{ROOT} input[data-option="sequence"]').fill(letters)


def random_letters(rng, alphabet, t_max):
    """A sequence with a repeated segment, or plain random letters."""
    t = int(rng.integers(1, t_max + 1))
    letters = list(rng.choice(list(alphabet), size=t))
    if t >= 6 and rng.random() < 0.7:  # a repeat, as in training
        n = int(rng.integers(2, t // 2 + 1))
        s = int(rng.integers(0, t - 2 * n + 1))
        letters[s + n : s + 2 * n] = letters[s : s + n]
    return "".join(letters)


def test_trained_heads_control_matches_mha_ref(
    site_origin, open_page, exported
):
    data, model = exported
    page, recorder = open_control(open_page, site_origin)
    shape = (data["n_layer"], data["n_head"])
    every = np.ones(shape, bool).tolist()
    problems = [
        f"page's example: {p}"
        for p in shown_problems(page, data, model, data["example"], every)
    ]
    rng = np.random.default_rng(5)
    for trial in range(TRIALS):
        letters = random_letters(rng, data["letters"], data["t_max"])
        keep = (rng.random(shape) < 0.7).tolist() if trial else every
        set_inputs(page, letters, keep, data["names"], data["n_head"])
        problems += shown_problems(page, data, model, letters, keep)
    problems += recorder.problems()
    assert not problems, "\n".join(problems[:40])


def test_trained_heads_forward_matches_mha_ref_logits(
    site_origin, open_page, exported
):
    """The JavaScript forward itself, on random sequences: logits."""
    data, model = exported
    page, _ = open_control(open_page, site_origin)
    rng = np.random.default_rng(9)
    shape = (data["n_layer"], data["n_head"])
    problems = []
    for case in range(12):
        letters = random_letters(rng, data["letters"], data["t_max"])
        tokens = [data["letters"].index(c) for c in letters]
        keep = (rng.random(shape) < 0.6).tolist()
        got = page.evaluate(
            """([tokens, keep]) => window.mhaTrainedHeads.load().then(
                 m => window.mhaTrainedHeads.forward(m, tokens, keep).logits)
            """,
            [tokens, keep],
        )
        with torch.no_grad():
            logits, _, _ = model(
                torch.tensor([tokens]), keep=torch.tensor(keep)
            )
        problems += mismatches(
            f"case {case} {letters} logits", np.array(got), logits[0], TOL
        )
    assert not problems, "\n".join(problems[:40])


def test_trained_heads_control_fails_with_a_wrong_scale(
    site_origin, open_page, exported
):
    """Drifted: attention divides by d_k instead of sqrt(d_k); caught."""
    data, model = exported
    page, _ = open_control(open_page, site_origin)
    every = np.ones((data["n_layer"], data["n_head"]), bool).tolist()
    assert not shown_problems(page, data, model, data["example"], every)
    page.evaluate("""() => {
      const right = window.mhaRef.attention;
      window.mhaRef.attention = (q, k, v, mask) =>
        right(q, k, v, mask, q[0].length);  // d_k, not sqrt(d_k)
    }""")
    page.locator(f'{ROOT} input[data-option="sequence"]').fill(
        data["example"][:-1]
    )
    problems = shown_problems(page, data, model, data["example"][:-1], every)
    assert any("L0H0[" in p for p in problems), problems


def predictable(tokens):
    """The positions whose next letter a repeat determines: inside the
    second copy of the longest segment (3 letters or more) that repeats
    right after itself, but its last letter (the control's rule)."""
    t = len(tokens)
    for length in range(t // 2, 2, -1):
        for start in range(t - 2 * length + 1):
            first = tokens[start : start + length]
            if first == tokens[start + length : start + 2 * length]:
                return [
                    start + length <= i < start + 2 * length - 1
                    for i in range(t)
                ]
    return [False] * t


def test_trained_heads_control_scores_only_the_predictable_positions(
    site_origin, open_page, exported
):
    """The shaded cells are the positions the repeat determines, and the
    status counts the model's right guesses among those alone."""
    data, model = exported
    page, _ = open_control(open_page, site_origin)
    problems = []
    rng = np.random.default_rng(11)
    cases = [data["example"], "abcdefgh"] + [
        random_letters(rng, data["letters"], data["t_max"]) for _ in range(8)
    ]
    every = np.ones((data["n_layer"], data["n_head"]), bool).tolist()
    for letters in cases:
        set_inputs(page, letters, every, data["names"], data["n_head"])
        shaded = page.evaluate(
            """root => [...document.querySelector(root).querySelectorAll(
                 'table[data-role="predictions"] tbody tr:first-child td'
               )].map(td => td.dataset.predictable === "true")""",
            ROOT,
        )
        tokens = [data["letters"].index(c) for c in letters]
        want = predictable(tokens)
        if shaded != want:
            problems.append(f"{letters}: shaded {shaded}, expected {want}")
        # a tick or a cross only where the repeat determines the letter
        marked = page.evaluate(
            """root => [...document.querySelector(root).querySelectorAll(
                 'table[data-role="predictions"] tbody tr:nth-child(3) td'
               )].map(td => /[\u2713\u2717]/.test(td.textContent))""",
            ROOT,
        )
        if marked != want:
            problems.append(f"{letters}: marked {marked}, expected {want}")
        _, guess, _ = expected(model, tokens, every)
        right = sum(
            guess[i] == tokens[i + 1] for i in range(len(tokens)) if want[i]
        )
        status = page.evaluate(_READ, ROOT)["status"]
        says = (
            f"predicts {right} of the {sum(want)} letters"
            if any(want)
            else "no next letter can be predicted"
        )
        if says not in status:
            problems.append(f"{letters}: status {status!r} lacks {says!r}")
    if not any(predictable([data["letters"].index(c) for c in cases[0]])):
        problems.append("the page's example shows no predictable position")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("abcz", "\u201cz\u201d is not a token"),
        ("ab1", "\u201c1\u201d is not a token"),
        ("", "at least one letter"),
        ("a" * 25, "at most 24"),
    ],
)
def test_trained_heads_control_refuses_bad_input(
    site_origin, open_page, typed, says
):
    page, _ = open_control(open_page, site_origin)
    page.locator(f'{ROOT} input[data-option="sequence"]').fill(typed)
    shown = page.evaluate(_READ, ROOT)
    assert says in shown["status"]
    assert not shown["grids"]
    assert not shown["tokens"]
    assert "NaN" not in shown["text"]
    invalid = page.locator(f'{ROOT} input[data-option="sequence"]')
    assert invalid.get_attribute("aria-invalid") == "true"


def test_trained_heads_control_accepts_spaces_and_capitals(
    site_origin, open_page, exported
):
    data, model = exported
    page, _ = open_control(open_page, site_origin)
    page.locator(f'{ROOT} input[data-option="sequence"]').fill("AbC ab c")
    every = np.ones((data["n_layer"], data["n_head"]), bool).tolist()
    assert not shown_problems(page, data, model, "abcabc", every)


def test_trained_heads_control_fits_a_phone(site_origin, open_page):
    page, recorder = open_control(open_page, site_origin, viewport=PHONE)
    problems = pagecheck.overflow_problems(page)
    box = page.locator(ROOT).bounding_box()
    if box["x"] < 0 or box["x"] + box["width"] > PHONE["width"]:
        problems.append(
            f"the control spans {box['x']:.0f} to "
            f"{box['x'] + box['width']:.0f}px"
        )
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_trained_heads_control_is_labelled_and_keyboard_usable(
    site_origin, open_page
):
    page, _ = open_control(open_page, site_origin)
    found = page.evaluate(
        """root => [...document.querySelector(root)
                     .querySelectorAll("input, button")].map(el => {
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
        })""",
        ROOT,
    )
    problems = [f"{f['what']}: no label" for f in found if not f["named"]]
    problems += [f"{f['what']}: no focus" for f in found if not f["focused"]]
    problems += [
        f"{f['what']}: no visible focus outline"
        for f in found
        if not f["outline"]
    ]
    live = page.locator(f'{ROOT} [aria-live="polite"]')
    if live.count() != 1:
        problems.append("no aria-live region for the results")
    # the keyboard alone: focus the first head's box, Space turns it off
    first = page.locator(f"{ROOT} input[data-head]").first
    first.focus()
    page.keyboard.press("Space")
    if first.is_checked():
        problems.append("Space did not switch the head off")
    elif "Heads off" not in live.text_content():
        problems.append(f"status does not say so: {live.text_content()!r}")
    assert found
    assert not problems, "\n".join(problems)


def test_trained_heads_weights_load_under_any_site_path(
    site_dir, serve_dir, open_page, tmp_path
):
    """The site served from a sub-folder (as on GitHub Pages): the
    control finds the weights relative to its script."""
    (tmp_path / "some" / "path").mkdir(parents=True)
    (tmp_path / "some" / "path" / "site").symlink_to(site_dir.resolve())
    origin = serve_dir(tmp_path)
    page, recorder = open_control(
        open_page, origin, path=f"some/path/site/{PATH}"
    )
    assert page.locator(f'{ROOT} table[data-role="weights"]').count() > 0
    problems = [p for p in recorder.problems() if "sitemap" not in p]
    assert not problems, "\n".join(problems)
