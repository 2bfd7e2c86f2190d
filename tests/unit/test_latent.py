"""mha_ref.latent_torch and latent_numpy: multi-head latent attention.

The two forms against each other, the NumPy mirror against the torch
module, the latent cache against the full causal pass, the measured
cache and FLOP counts, and the inputs both mirrors refuse. Agreement
with Hugging Face's DeepseekV3Attention is in test_latent_hf.py.
"""

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mha_ref import (
    kv_cache,
    latent_numpy,
    latent_torch,
    numpy_ref,
    torch_ref,
)
from mha_ref.tolerances import atol

TOL = {"atol": atol(torch.float64), "rtol": 0}
# d_model, n_head, kv_lora_rank, qk_nope, qk_rope, v_head: all different,
# so a swapped size fails a shape, and v_head != qk_nope + qk_rope
SHAPES = (24, 3, 10, 6, 4, 5)


def random_mla(q_lora_rank=None, rope_interleave=True, seed=0, shapes=SHAPES):
    """A float64 module with every weight drawn, the norms' gains too."""
    module = latent_torch.MultiHeadLatentAttention(
        *shapes,
        q_lora_rank=q_lora_rank,
        rope_interleave=rope_interleave,
        dtype=torch.float64,
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            draw = torch.randn(param.shape, generator=gen, dtype=param.dtype)
            # gains near 1, weights scaled to keep activations near 1
            scale = 0.3 if param.dim() == 1 else param.shape[-1] ** -0.5
            param.copy_((1.0 if param.dim() == 1 else 0.0) + scale * draw)
    return module


def random_x(b=2, t=7, d_model=SHAPES[0], seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, d_model, generator=gen, dtype=torch.float64)


VARIANTS = [
    pytest.param(None, True, id="no-q-lora-interleaved"),
    pytest.param(None, False, id="no-q-lora-halves"),
    pytest.param(7, True, id="q-lora-interleaved"),
    pytest.param(7, False, id="q-lora-halves"),
]


@pytest.mark.parametrize(("q_lora_rank", "interleave"), VARIANTS)
@pytest.mark.parametrize("masked", ["causal", "padding", "none"])
def test_mla_absorbed_equals_naive(q_lora_rank, interleave, masked):
    module = random_mla(q_lora_rank, interleave)
    x = random_x()
    mask = {
        "causal": torch_ref.causal_mask(7),
        "padding": torch_ref.key_padding_mask([7, 4], 7),
        "none": None,
    }[masked]
    positions = torch.arange(40, 47)  # absolute positions, not 0..T-1
    y, w = module(x, mask, positions)
    y_abs, w_abs = module(x, mask, positions, absorbed=True)
    torch.testing.assert_close(y_abs, y, **TOL)
    torch.testing.assert_close(w_abs, w, **TOL)
    assert y.abs().max() > 0.1  # a real output, not zeros that agree


def test_mla_absorbed_gradients_equal_naive():
    module = random_mla(q_lora_rank=7)
    x = random_x().requires_grad_()
    dy = random_x(seed=5)
    grads = []
    for absorbed in (False, True):
        y, _ = module(x, torch_ref.causal_mask(7), absorbed=absorbed)
        params = [x, *module.parameters()]
        grads.append(torch.autograd.grad((y * dy).sum(), params))
    for naive, absorbed in zip(*grads, strict=True):
        torch.testing.assert_close(absorbed, naive, **TOL)


def test_mla_absorbed_form_is_mqa_through_sdpa():
    # one key head [c; k_R] and one value head c for every query head,
    # queries [q_nope W_UK; q_rope]: SDPA's MQA with the module's scale
    module = random_mla(q_lora_rank=7)
    x, causal = random_x(), torch_ref.causal_mask(7)
    positions = torch.arange(7)
    q_nope, q_rope = module.queries(x, positions)  # (B, H, T, .)
    c_kv, k_rope = module.latents(x, positions)  # (B, T, .)
    w_uk, w_uv = module.up_projections()
    q = torch.cat([q_nope @ w_uk, q_rope], dim=-1)  # (B, H, T, d_c + d_R)
    k = torch.cat([c_kv, k_rope], dim=-1)[:, None]  # (B, 1, T, d_c + d_R)

    def mqa(scale=None):
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, c_kv[:, None], ~causal, scale=scale, enable_gqa=True
        )  # SDPA's boolean mask: True = allowed
        return module.output(out @ w_uv.transpose(-2, -1))

    want, _ = module(x, causal)
    torch.testing.assert_close(mqa(module.scale), want, **TOL)
    # SDPA's default, 1 / sqrt(d_c + d_R), is another function
    assert (mqa() - want).abs().max() > 0.01


def test_mla_keys_and_values_of_all_heads_have_the_latent_rank():
    # every head's keys and values are linear images of one latent
    module = random_mla()
    x = random_x(b=1, t=40)
    k, v = module.expand_kv(*module.latents(x, torch.arange(40)))
    _, n_head, d_c, d_nope, d_rope, _ = SHAPES

    def side_by_side(heads):  # (1, H, T, d) -> (T, H * d)
        return heads[0].transpose(0, 1).reshape(40, -1)

    content = side_by_side(k[..., :d_nope])  # (T, H * d_nope) = (40, 18)
    both = torch.cat([side_by_side(k), side_by_side(v)], dim=-1)  # (40, 45)
    assert torch.linalg.matrix_rank(content) == d_c < n_head * d_nope
    assert torch.linalg.matrix_rank(both) == d_c + d_rope


def test_mla_rope_interleave_is_a_reordering_of_the_rope_rows():
    # interleaved pairs (2i, 2i + 1) are the halves after moving rows
    halves = random_mla(rope_interleave=False)
    interleaved = random_mla(rope_interleave=True)
    interleaved.load_state_dict(halves.state_dict())
    d_c, d_r = SHAPES[2], SHAPES[4]
    # the halves a rope_interleave module reads: evens, then odds
    order = torch.cat([torch.arange(0, d_r, 2), torch.arange(1, d_r, 2)])
    with torch.no_grad():
        w = interleaved.kv_a_proj_with_mqa.weight
        w[d_c:] = w[d_c:][order.argsort()]  # rows into pair order
        q = interleaved.q_proj.weight.view(SHAPES[1], -1, SHAPES[0])
        q[:, SHAPES[3] :] = q[:, SHAPES[3] :][:, order.argsort()]
    x = random_x()
    torch.testing.assert_close(interleaved(x)[0], halves(x)[0], **TOL)
    # without the reordering, the two conventions differ
    plain = random_mla(rope_interleave=True)
    plain.load_state_dict(halves.state_dict())
    assert (plain(x)[0] - halves(x)[0]).abs().max() > 1e-3


@pytest.mark.parametrize(("q_lora_rank", "interleave"), VARIANTS)
@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_numpy_mirror_matches_torch(q_lora_rank, interleave, absorbed):
    module = random_mla(q_lora_rank, interleave)
    mirror = latent_numpy.MultiHeadLatentAttention(
        *SHAPES, q_lora_rank=q_lora_rank, rope_interleave=interleave
    )
    mirror.load_state_dict(
        {n: w.numpy() for n, w in module.state_dict().items()}
    )
    x, mask = random_x(), torch_ref.causal_mask(7)
    positions = np.arange(3, 10)
    y, w = module(x, mask, torch.as_tensor(positions), absorbed=absorbed)
    y_np, w_np = mirror(x.numpy(), mask.numpy(), positions, absorbed)
    np.testing.assert_allclose(y_np, y.detach().numpy(), **TOL)
    np.testing.assert_allclose(w_np, w.detach().numpy(), **TOL)
    assert numpy_ref.MultiHeadLatentAttention is type(mirror)
    assert torch_ref.MultiHeadLatentAttention is type(module)


def test_mla_numpy_state_dict_round_trips():
    mirror = latent_numpy.MultiHeadLatentAttention(*SHAPES, q_lora_rank=7)
    torch_names = random_mla(q_lora_rank=7).state_dict()
    assert list(mirror.state_dict()) == list(torch_names)
    for name, weight in mirror.state_dict().items():
        assert weight.shape == tuple(torch_names[name].shape)


@pytest.mark.parametrize(
    "chunks", [[7], [1] * 7, [3, 1, 1, 2], [2, 5], [4, 3]]
)
@pytest.mark.parametrize("absorbed", [False, True])
def test_latent_cache_equals_full_causal_pass(chunks, absorbed):
    module = random_mla(q_lora_rank=7)
    x = random_x()
    full, _ = module(x, mask=torch_ref.causal_mask(7))  # the naive form
    cached = latent_torch.cached_latent_forward(module, x, chunks, absorbed)
    torch.testing.assert_close(cached, full, **TOL)


@pytest.mark.parametrize("chunks", [[7], [3, 1, 1, 2], [1] * 7])
def test_kv_cache_cached_forward_takes_latent_attention(chunks):
    # the KV cache's own loop hands a latent module to its latent cache
    module = random_mla(q_lora_rank=7)
    x = random_x()
    full, _ = module(x, mask=torch_ref.causal_mask(7))
    cached = kv_cache.cached_forward(module, x, chunks)
    torch.testing.assert_close(cached, full, **TOL)


def test_latent_cache_stores_the_latent_and_shared_key_only():
    module = random_mla()
    x = random_x()
    cache = latent_torch.LatentCache()
    latent_torch.cached_latent_step(module, cache, x[:, :4])
    latent_torch.cached_latent_step(module, cache, x[:, 4:])
    # exactly what the module computes at absolute positions 0..6
    c_kv, k_rope = module.latents(x, torch.arange(7))
    tensors = {n: t for n, t in vars(cache).items() if torch.is_tensor(t)}
    assert set(tensors) == {"latent", "rope_key"}
    torch.testing.assert_close(cache.latent, c_kv, **TOL)
    torch.testing.assert_close(cache.rope_key, k_rope, **TOL)
    d_c, d_rope = SHAPES[2], SHAPES[4]
    per_token = latent_torch.cache_bytes_per_token(cache)
    assert per_token == (d_c + d_rope) * 8  # float64


def test_latent_cache_failed_step_leaves_cache_unchanged():
    module = random_mla()
    x = random_x()
    cache = latent_torch.LatentCache()
    latent_torch.cached_latent_step(module, cache, x[:, :3])
    before = cache.latent.clone(), cache.rope_key.clone()
    bad_inputs = [
        x[:, 3:4].clone().fill_(float("nan")),  # not finite
        x[:1, 3:4],  # another batch size
        x[:, 3:4].float(),  # another dtype
        x[:, 3:4, :-1],  # another d_model
    ]
    for bad in bad_inputs:
        with pytest.raises((ValueError, TypeError)):
            latent_torch.cached_latent_step(module, cache, bad)
        assert cache.length == 3
        torch.testing.assert_close(cache.latent, before[0], atol=0, rtol=0)
        torch.testing.assert_close(cache.rope_key, before[1], atol=0, rtol=0)


def test_cache_bytes_per_token_mla_against_mha_and_gqa_caches():
    # the same decode through a latent cache and two KV caches, measured
    mla = random_mla()
    x = random_x()
    latent = latent_torch.LatentCache()
    full = kv_cache.KVCache()  # this model's per-head K and V (MHA)
    for t in range(7):
        latent_torch.cached_latent_step(mla, latent, x[:, t : t + 1])
    full.append(*mla.expand_kv(latent.latent, latent.rope_key))
    _, n_head, d_c, d_nope, d_rope, d_v = SHAPES
    assert latent_torch.cache_bytes_per_token(latent) == (d_c + d_rope) * 8
    assert latent_torch.cache_bytes_per_token(full) == (
        n_head * (d_nope + d_rope + d_v) * 8
    )
    gqa = torch_ref.MultiHeadAttention(24, 6, n_kv_head=2, dtype=torch.float64)
    grouped = kv_cache.KVCache()
    kv_cache.cached_step(gqa, grouped, x)
    assert latent_torch.cache_bytes_per_token(grouped) == 2 * 2 * 4 * 8


def test_latent_cache_bytes_per_token_has_no_head_axis():
    # the measured bytes depend on the two ranks and the dtype only
    small = latent_torch.MultiHeadLatentAttention(8, 1, 16, 2, 4, 2)
    wide = {
        **latent_torch.DEEPSEEK_V3,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 4,
    }
    measure = latent_torch.latent_cache_bytes_per_token
    assert measure(small) == measure(wide, torch.float32) == 20 * 4
    assert measure(latent_torch.DEEPSEEK_V3) == (512 + 64) * 2  # bfloat16


@pytest.mark.slow  # FlopCounterMode's first use imports torch._dynamo
@pytest.mark.parametrize("q_lora_rank", [None, 7])
@pytest.mark.parametrize("absorbed", [False, True])
def test_decode_step_flops_match_flop_counter(q_lora_rank, absorbed):
    module = random_mla(q_lora_rank)
    x = random_x(b=1)
    cache = latent_torch.LatentCache()
    latent_torch.cached_latent_step(module, cache, x[:, :6])
    with FlopCounterMode(display=False) as counter:
        latent_torch.cached_latent_step(module, cache, x[:, 6:], absorbed)
    expected = latent_torch.decode_step_flops(module, 7, absorbed)
    assert counter.get_total_flops() == sum(expected.values())


def test_decode_step_flops_absorbed_saves_the_expansion():
    v3 = latent_torch.DEEPSEEK_V3
    naive = latent_torch.decode_step_flops(v3, 4096)
    absorbed = latent_torch.decode_step_flops(v3, 4096, absorbed=True)
    # the naive step re-expands 4096 latents into 128 heads' K and V
    assert naive["up_projections"] == 2 * 4096 * 512 * 128 * 256
    assert sum(absorbed.values()) < sum(naive.values()) / 50


def test_rope_on_the_content_keys_cannot_be_folded():
    module = random_mla(shapes=(24, 3, 10, 6, 4, 5))
    x = random_x()
    # at position 0 everywhere, RoPE is the identity: every try is exact
    zeros = torch.zeros(7, dtype=torch.long)
    exact, as_cached, turned = latent_torch.rope_on_the_content_keys(
        module, x, zeros
    )
    torch.testing.assert_close(as_cached, exact, **TOL)
    torch.testing.assert_close(turned, exact, **TOL)
    positions = torch.arange(7)
    exact, as_cached, turned = latent_torch.rope_on_the_content_keys(
        module, x, positions
    )
    # the fold is right for the key at position 0 only
    torch.testing.assert_close(as_cached[..., 0], exact[..., 0], **TOL)
    assert (as_cached - exact)[..., 1:].abs().amax(dim=(0, 1, 2)).min() > 0.01
    assert (turned - exact).abs().max() > 0.1
    # the exact scores depend on s - t only; the folded ones do not
    shifted = latent_torch.rope_on_the_content_keys(module, x, positions + 5)
    torch.testing.assert_close(shifted[0], exact, **TOL)
    assert (shifted[1] - as_cached).abs().max() > 0.1


def test_expanded_kv_bytes_per_token_counts_every_head():
    v3 = latent_torch.DEEPSEEK_V3
    per_head = v3["qk_nope_head_dim"] + v3["qk_rope_head_dim"]
    per_head += v3["v_head_dim"]
    measured = latent_torch.expanded_kv_bytes_per_token(v3)
    assert measured == v3["n_head"] * per_head * 2  # bfloat16
    module = random_mla()
    assert latent_torch.expanded_kv_bytes_per_token(module) == 3 * 15 * 8


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mla_on_cuda_matches_cpu(dtype):
    module = random_mla(q_lora_rank=7).to(dtype)
    x = random_x().to(dtype)
    want = module(x, torch_ref.causal_mask(7))[0]
    gpu = module.to("cuda")
    tol = {"atol": atol(dtype), "rtol": 0}
    for absorbed in (False, True):
        got = latent_torch.cached_latent_forward(
            gpu, x.cuda(), [3, 1, 1, 2], absorbed
        )
        torch.testing.assert_close(got.cpu(), want, **tol)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_of_an_empty_batch_is_empty(framework, absorbed):
    # B = 0: q.view(b, t, H, -1) raised torch's (and NumPy's) own error
    module = random_mla()
    x = torch.zeros(0, 5, SHAPES[0], dtype=torch.float64)
    if framework == "numpy":
        mirror = latent_numpy.MultiHeadLatentAttention(*SHAPES)
        y, w = mirror(x.numpy(), absorbed=absorbed)
    else:
        y, w = module(x, absorbed=absorbed)
    assert tuple(y.shape) == (0, 5, SHAPES[0])
    assert tuple(w.shape) == (0, SHAPES[1], 5, 5)
    assert latent_torch.cached_latent_forward(module, x, [3, 2]).shape[0] == 0


def test_rms_norm_matches_its_formula_and_names_bad_input():
    gen = np.random.default_rng(0)
    x, gain = gen.standard_normal((2, 3, 4)), gen.standard_normal(4)
    want = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * gain
    np.testing.assert_allclose(latent_numpy.rms_norm(x, gain), want, **TOL)
    norm = latent_torch.RMSNorm(4, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(gain))
    got = norm(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, **TOL)
    # NaN, a negative eps (sqrt of < 0) gave NaN; a misfit x or d < 1
    # raised NumPy's or torch's own error
    bad_x = np.where(np.arange(4) == 0, np.nan, x)
    with pytest.raises(ValueError, match="x of shape"):
        latent_numpy.rms_norm(bad_x, gain)
    with pytest.raises(ValueError, match="x of shape"):
        norm(torch.from_numpy(bad_x))
    with pytest.raises(ValueError, match="eps must be positive"):
        latent_numpy.rms_norm(np.zeros((1, 4)), gain, eps=-1.0)
    with pytest.raises(ValueError, match="eps must be positive"):
        latent_torch.RMSNorm(4, eps=float("nan"))
    with pytest.raises(ValueError, match="must end in the d = 4 features"):
        norm(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="d must be positive"):
        latent_torch.RMSNorm(-1)


def test_cache_bytes_per_token_of_an_empty_batch():
    # a batch of zero sequences divided by zero (latent and plain caches)
    mla = random_mla()
    latent, full = latent_torch.LatentCache(), kv_cache.KVCache()
    for t in range(3):
        latent_torch.cached_latent_step(mla, latent, random_x(b=0)[:, [t]])
    full.append(*mla.expand_kv(latent.latent, latent.rope_key))
    _, n_head, d_c, d_nope, d_rope, d_v = SHAPES
    assert latent.latent.shape[0] == 0
    assert latent.length == 3
    assert latent_torch.cache_bytes_per_token(latent) == (d_c + d_rope) * 8
    assert latent_torch.cache_bytes_per_token(full) == (
        n_head * (d_nope + d_rope + d_v) * 8
    )


POSITION_FORMS = {
    "iterator": lambda p: iter(p.tolist()),
    "list": lambda p: p.tolist(),
    "int tensor": torch.from_numpy,
    "bfloat16 tensor": lambda p: torch.tensor(p, dtype=torch.bfloat16),
    "tensor with grad": lambda p: torch.tensor(p * 1.0, requires_grad=True),
}


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("form", list(POSITION_FORMS))
def test_mla_takes_positions_in_every_form(framework, form):
    # latent_numpy refused tensors and iterators that latent_torch takes
    module = random_mla()
    x, positions = random_x(), np.arange(3, 10)  # whole, exact in bf16
    want, _ = module(x, positions=torch.as_tensor(positions))
    given = POSITION_FORMS[form](positions)
    if framework == "torch":
        got = module(x, positions=given)[0].detach().numpy()
    else:
        mirror = latent_numpy.MultiHeadLatentAttention(*SHAPES)
        mirror.load_state_dict(
            {n: w.numpy() for n, w in module.state_dict().items()}
        )
        got = mirror(x.numpy(), positions=given)[0]
    np.testing.assert_allclose(got, want.detach().numpy(), **TOL)


def test_rope_on_the_content_keys_reads_iterator_positions_once():
    # the guard read the iterator, queries() then found it empty
    module = random_mla(shapes=(24, 3, 10, 6, 4, 5))
    x, at = random_x(), [3, 0, 5, 1, 2, 6, 4]
    want = latent_torch.rope_on_the_content_keys(module, x, torch.tensor(at))
    got = latent_torch.rope_on_the_content_keys(module, x, iter(at))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    # the exact scores, against the naive form's (no mask, same positions)
    q_nope, _ = module.queries(x, torch.tensor(at))
    k, _ = module.expand_kv(*module.latents(x, torch.tensor(at)))
    turned_k = torch_ref.apply_rope(k[..., :6], torch.tensor(at))
    turned_q = torch_ref.apply_rope(q_nope, torch.tensor(at))
    torch.testing.assert_close(
        got[0], turned_q @ turned_k.transpose(-2, -1), **TOL
    )
