"""The data contract between scripts/ and the pages (DATA SCHEMA).

Each topic's compute() is called directly and converted as the build
converts it, so these tests see exactly what the pages read.
"""

import importlib

import pytest

from scripts import common


def data(topic):
    module = importlib.import_module(f"scripts.{topic}")
    return common.plain(module.compute())


def test_runtime_names_versions_and_device():
    import numpy as np
    import torch

    runtime = data("runtime")
    assert runtime["numpy"] == np.__version__
    assert runtime["torch"] == torch.__version__
    assert runtime["cuda_available"] == torch.cuda.is_available()
    assert (runtime["device"] == "cpu") == (not runtime["cuda_available"])
    assert set(runtime) >= {"python", "platform"}


def test_weighted_sum_output():
    ws = data("weighted_sum")
    assert ws["values"] == [[2.0, 0.0], [0.0, 4.0]]
    assert ws["weights"] == [0.75, 0.25]
    assert ws["output"] == [1.5, 1.0]
    assert ws["softmax_of_scores"] == pytest.approx([0.75, 0.25])


def test_attention_matrix_causal_example():
    am = data("attention_matrix")
    assert am["t"] == 3
    assert am["causal_mask"] == [[False, True, True], [False, False, True],
                                 [False, False, False]]
    ex = am["example"]
    assert ex["t"] == 4
    assert ex["row_sums"] == pytest.approx([1.0] * 4, abs=1e-15)
    assert ex["weights"][0] == [1.0, 0.0, 0.0, 0.0]
    assert ex["future_weight"] == 0.0
    assert ex["masked_scores"][0][1:] == ["-inf"] * 3


def test_scaling_example_and_sweep():
    sc = data("scaling")
    assert (sc["d_head"], sc["d_model"], sc["sqrt_d_head"]) == (64, 512, 8.0)
    assert sc["scores"] == [8.0, -8.0]
    assert sc["scaled_weights"] == pytest.approx([0.880797, 0.119203],
                                                 abs=1e-6)
    assert sc["unscaled_weights"][1] == pytest.approx(1.1253517e-07)
    assert sc["shift_input"] == [1000.0, 1000.0]
    assert sc["shift_output"] == [0.5, 0.5]
    sweep = sc["sweep"]
    assert sweep["head_sizes"][0] == 4 and sweep["head_sizes"][-1] == 1024
    unscaled, scaled = sweep["max_weight_unscaled"], sweep["max_weight_scaled"]
    assert unscaled == sorted(unscaled) and unscaled[-1] > 0.99
    assert max(scaled) - min(scaled) < 0.1  # flat with 1/sqrt(d)


def test_softmax_backward_gradients():
    sb = data("softmax_backward")
    assert sb["probabilities"] == [0.5, 0.5]
    assert sb["upstream"] == [1.0, 0.0]
    assert sb["score_grad"] == [0.25, -0.25]
    assert sb["naive_grad"] == [0.25, 0.0]
    assert sb["ones_grad"] == [0.0, 0.0]
    assert 0 <= sb["autograd_max_diff"] < 1e-12


def test_multiple_heads_parameter_counts():
    mh = data("multiple_heads")
    assert mh["d_model"] == 512 and mh["total_params"] == 1048576
    assert [r["n_head"] for r in mh["rows"]] == [1, 2, 4, 8, 16]
    eight = mh["rows"][3]
    assert eight["d_head"] == 64 and eight["per_head_shape"] == "512 x 64"
    assert {r["total_params"] for r in mh["rows"]} == {4 * 512**2}
    assert {r["total_over_d_model_sq"] for r in mh["rows"]} == {4.0}
    ex = mh["heads_example"]
    assert (ex["n_head"], ex["t"]) == (4, 8)
    assert ex["future_weight"] == 0.0 and ex["row_sums_max_error"] < 1e-12


def test_pitfalls_symptoms():
    pf = data("pitfalls")
    demo = pf["mask_demo"]
    assert demo["softmax"] == [0.5, 0.5]
    assert demo["masked_before"] == [1.0, 0.0]
    assert demo["zeroed_after"] == [0.5, 0]
    assert demo["renormalised"] == [1.0, 0.0]
    assert demo["underflow_renormalised"] == ["nan", "nan"]
    assert demo["underflow_masked_before"] == [1.0, 0.0]
    split = pf["wrong_split"]
    assert split["same_shape"] is True
    assert split["shape_right"] == split["shape_wrong"] == [2, 2, 4, 4]
    assert split["max_abs_diff"] > 0.1
    assert "view size is not compatible" in pf["wrong_view_error"]
    assert pf["wrong_axis"]["col_sums"] == pytest.approx([1.0] * 3)
    assert pf["wrong_axis"]["row_sums"] != pytest.approx([1.0] * 3)
    assert pf["wrong_merge"]["max_abs_diff"] > 0.1
    layout = pf["wrong_layout"]
    assert layout["max_abs_diff"] > 0.01 > 1e-12 > layout["right_max_abs_diff"]
    scale = pf["wrong_scale"]
    assert scale["max_weight_wrong"] < scale["max_weight_right"]
    hs = pf["head_split"]
    assert hs["right_positions"][1][2] == [2, 2, 2, 2]
    assert hs["wrong_positions"][1][0] == [2, 2, 2, 2]  # head 1, row 0


def test_kv_cache_alignment():
    kv = data("kv_cache")
    assert kv["values"] == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert kv["query_positions"] == [3, 4]
    assert kv["key_positions"] == [0, 1, 2, 3, 4]
    assert kv["aligned"] == [25.0, 30.0]
    assert kv["upper_left"] == [10.0, 15.0]
    assert kv["aligned_mask"] == [[False] * 4 + [True], [False] * 5]
    assert kv["upper_left_mask"] == [[False] + [True] * 4,
                                     [False] * 2 + [True] * 3]
    assert kv["single_query"] == {"masked": [30.0], "unmasked": [30.0]}


def test_parity_rows_and_summary():
    pa = data("parity")
    cases = {(r["pair"], r["dtype"], r["device"], r["bias"], r["mask"])
             for r in pa["rows"]}
    assert len(cases) == len(pa["rows"])
    cpu = [r for r in pa["rows"] if r["device"] == "cpu"]
    assert len(cpu) == 3 * 2 * 2 * 5
    assert all(r["max_abs_diff"] <= r["tolerance"] for r in cpu)
    assert {r["tolerance"] for r in cpu if r["dtype"] == "float32"} == {1e-5}
    assert set(pa["summary"]) == {"sdpa", "library", "numpy"}
    assert all(0 <= v <= 1e-5 for v in pa["summary"].values())
    assert 0 < pa["rows_sum_to_one"] < 1e-6
    assert pa["future_weight"] == 0.0
    assert pa["all_passed"] is True
    assert pa["cuda_rows_included"] == pa["environment"]["cuda_available"]


def test_parity_note_says_cpu_only_without_cuda():
    from scripts import parity

    env = {"numpy": "2.0", "torch": "2.4", "python": "3.11",
           "platform": "Linux x86_64", "device": "cpu"}
    note = parity.environment_note(
        {"environment": env, "cuda_rows_included": False})
    assert "numpy 2.0, torch 2.4" in note
    assert note.endswith(
        "Computed on CPU only: no CUDA device in this build.")
    gpu = {**env, "device": "NVIDIA H200"}
    note = parity.environment_note(
        {"environment": gpu, "cuda_rows_included": True})
    assert "device NVIDIA H200" in note and "CPU only" not in note
