"""The doors of serving.py: one guard per public function, same name
(the constructor's: paged_kv_cache). A check runs before anything
changes, so a refused call leaves a PagedKVCache as it was.
"""

import numpy as np
import torch

from mha_ref.guards.arrays import (
    grouped_scores_shape,
    is_tensor,
    positive_integer,
    rule_int,
    score_scale,
)
from mha_ref.guards.tensors import as_index, float_tensors, is_tensor_scalar


def paged_kv_cache(num_blocks, block_size, n_kv_heads, d_head, dtype):
    """A PagedKVCache's sizes: positive ints; dtype a floating dtype."""
    for name, value in (
        ("num_blocks", num_blocks),
        ("block_size", block_size),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
    ):
        positive_integer(value, name)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"dtype must be a floating torch.dtype (torch.float32, "
            f"torch.float64, ...), got {dtype!r}"
        )


def _sequence_id(seq_id, name="seq_id"):
    """A sequence's name: an int (a 0-d int tensor too) or a str."""
    if is_tensor_scalar(seq_id):
        seq_id = as_index(seq_id, name)
    if isinstance(seq_id, np.integer):
        seq_id = int(seq_id)
    if isinstance(seq_id, bool) or not isinstance(seq_id, int | str):
        raise TypeError(
            f"{name} must be an int or a str, got "
            f"{type(seq_id).__name__} {seq_id!r:.60}"
        )
    return seq_id


def _known(cache, seq_id, name="seq_id"):
    """A sequence the cache holds; returns its key."""
    seq_id = _sequence_id(seq_id, name)
    if seq_id not in cache.tables:
        held = sorted(cache.tables, key=repr)[:8]
        raise ValueError(
            f"{name}={seq_id!r} is an unknown sequence; the cache holds {held}"
        )
    return seq_id


def append(cache, seq_id, k, v):
    """k, v (n_kv_heads, T_new, d_head), finite, for cache.append.

    Returns the sequence's key and k, v in the cache's dtype.
    """
    seq_id = _sequence_id(seq_id)
    float_tensors(k=k, v=v)
    want = (cache.n_kv_heads, cache.d_head)
    for name, x in (("k", k), ("v", v)):
        shape = tuple(x.shape)
        if len(shape) != 3 or (shape[0], shape[2]) != want:
            raise ValueError(
                f"{name} must be (n_kv_heads, T_new, d_head) = "
                f"({want[0]}, T_new, {want[1]}), got {shape}"
            )
    if k.shape != v.shape:
        raise ValueError(
            f"k {tuple(k.shape)} and v {tuple(v.shape)} must have one "
            f"shape (n_kv_heads, T_new, d_head)"
        )
    cpu = cache.keys.device
    return seq_id, k.to(cpu, cache.dtype), v.to(cpu, cache.dtype)


def fork(cache, parent_id, child_id):
    """A parent the cache holds and a child it does not hold yet."""
    parent_id = _known(cache, parent_id, "parent_id")
    child_id = _sequence_id(child_id, "child_id")
    if child_id in cache.tables:
        raise ValueError(
            f"child_id={child_id!r} is already a sequence of the cache; "
            f"free it first or pick a new id"
        )
    return parent_id, child_id


def paged_attention(q, cache, seq_ids, scale):
    """q (N, H, d_head) and N known, non-empty sequences of ``cache``.

    Returns the sequences' keys as a list.
    """
    if not isinstance(getattr(cache, "tables", None), dict):
        raise TypeError(
            f"cache must be a serving.PagedKVCache, got {type(cache).__name__}"
        )
    float_tensors(q=q)
    score_scale(scale)
    shape = tuple(q.shape)
    if len(shape) != 3 or shape[0] < 1 or shape[2] != cache.d_head:
        raise ValueError(
            f"q must be (N, H, d_head) with N >= 1 and d_head = "
            f"{cache.d_head}, got {shape}"
        )
    if shape[1] % cache.n_kv_heads:
        raise ValueError(
            f"q has H={shape[1]} heads but the cache {cache.n_kv_heads} "
            f"key/value heads: H must be a multiple of n_kv_heads"
        )
    if is_tensor(seq_ids) or isinstance(seq_ids, np.ndarray):
        seq_ids = seq_ids.tolist()
    if isinstance(seq_ids, int | str) or not hasattr(seq_ids, "__len__"):
        raise TypeError(
            f"seq_ids must be a list of N = {shape[0]} sequence ids, got "
            f"{type(seq_ids).__name__} {seq_ids!r:.60}"
        )
    if len(seq_ids) != shape[0]:
        raise ValueError(
            f"seq_ids holds {len(seq_ids)} ids but q {shape} holds "
            f"N = {shape[0]} queries: one id per query"
        )
    ids = [_known(cache, s, f"seq_ids[{i}]") for i, s in enumerate(seq_ids)]
    for i, s in enumerate(ids):
        if cache.lengths[s] == 0:
            raise ValueError(
                f"seq_ids[{i}]={s!r} holds no keys yet: append its "
                f"prompt before a decoding step"
            )
    return ids


def _offsets(value, name):
    """cu_seqlens: a 1-D integer sequence, as a CPU int64 tensor."""
    if is_tensor(value):
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got {value.dtype}")
        array = value.detach().cpu().long()
    else:
        numbers = np.asarray(value)
        if numbers.dtype.kind not in "iu":
            raise TypeError(
                f"{name} must be a sequence of integer offsets, got "
                f"{type(value).__name__} {value!r:.60}"
            )
        array = torch.as_tensor(numbers.astype(np.int64))
    if array.dim() != 1 or len(array) < 2:
        raise ValueError(
            f"{name} must be 1-D (B + 1,) with B >= 1 sequences, got "
            f"shape {tuple(array.shape)}"
        )
    return array


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale):
    """Packed q (total_q, H, d), k, v (total_k, H_kv, d) and their
    offsets; returns the lengths Lq, Lk, (B,) each."""
    float_tensors(q=q, k=k, v=v)
    score_scale(scale)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 3:
            raise ValueError(
                f"{name} must be 3-D (total, heads, d), got {tuple(x.shape)}"
            )
    grouped_scores_shape(
        q.transpose(0, 1).shape,
        k.transpose(0, 1).shape,
        v.transpose(0, 1).shape,
    )  # H a multiple of H_kv, d and total_k agree
    lengths = []
    for name, cu, total in (
        ("cu_seqlens_q", cu_seqlens_q, q.shape[0]),
        ("cu_seqlens_k", cu_seqlens_k, k.shape[0]),
    ):
        cu = _offsets(cu, name)
        steps = cu[1:] - cu[:-1]  # (B,)
        if cu[0] != 0:
            raise ValueError(f"{name} must start at 0, got {cu.tolist()}")
        if (steps < 0).any():
            i = int(torch.nonzero(steps < 0)[0])
            raise ValueError(
                f"{name} decreases at index {i + 1}: {cu.tolist()}; "
                f"offsets never decrease"
            )
        if cu[-1] != total:
            raise ValueError(
                f"{name} ends at {int(cu[-1])} but the packed tensor "
                f"holds {total} rows: the last offset is the total"
            )
        lengths.append(steps)
    lq, lk = lengths
    if len(lq) != len(lk):
        raise ValueError(
            f"cu_seqlens_q holds {len(lq)} sequences and cu_seqlens_k "
            f"{len(lk)}: one pair of offsets per sequence"
        )
    if causal and (lq > lk).any():
        i = int(torch.nonzero(lq > lk)[0])
        raise ValueError(
            f"cu_seqlens_q: sequence {i} has Lq={int(lq[i])} queries but "
            f"Lk={int(lk[i])} keys; with causal=True every sequence "
            f"needs Lq <= Lk (the queries are its last Lq positions)"
        )
    if ((lq > 0) & (lk == 0)).any():
        i = int(torch.nonzero((lq > 0) & (lk == 0))[0])
        raise ValueError(
            f"cu_seqlens_k: sequence {i} has {int(lq[i])} queries and "
            f"no keys; each query needs at least one key"
        )
    return lq, lk


def _real(value, name):
    # a floating tensor stays; an array or a list of reals: float64
    if is_tensor(value):
        if not value.dtype.is_floating_point:
            raise TypeError(
                f"{name} must be a floating tensor, got {value.dtype}"
            )
        return value
    numbers = np.asarray(value)
    if numbers.dtype.kind not in "iuf":
        raise TypeError(
            f"{name} must hold real numbers, got {type(value).__name__} "
            f"{value!r:.60}"
        )
    if numbers.dtype.kind != "f":
        numbers = numbers.astype(np.float64)
    return torch.from_numpy(np.ascontiguousarray(numbers))


def _stacked(value):
    # a list of P tensors, one per partial, as one (P, ...) tensor
    if (
        isinstance(value, list | tuple)
        and value
        and all(map(is_tensor, value))
    ):
        if len({tuple(t.shape) for t in value}) > 1:
            shapes = [tuple(t.shape) for t in value]
            raise ValueError(
                f"the partials must share one shape, got {shapes}"
            )
        return torch.stack(value)
    return value


def merge_partials(outputs, lses):
    """outputs (P, ..., d) and lses (P, ...) for merge_partials.

    An LSE may be +-inf (an empty partial), never NaN; a partial that
    is not empty has a finite output. Returns both as tensors of one
    wide dtype and a function giving the result in the caller's kind
    (NumPy arrays for NumPy or list input, tensors otherwise).
    """
    outputs, lses = _stacked(outputs), _stacked(lses)
    as_numpy = not (is_tensor(outputs) or is_tensor(lses))
    out_dtype = _real(outputs, "outputs").dtype
    outputs, lses = _real(outputs, "outputs"), _real(lses, "lses")
    if outputs.device != lses.device:
        raise ValueError(
            f"outputs and lses must be on one device, got "
            f"{outputs.device} and {lses.device}"
        )
    if outputs.dim() < 2 or outputs.shape[0] < 1:
        raise ValueError(
            f"outputs must be (P, ..., d) with P >= 1 partials, got "
            f"{tuple(outputs.shape)}"
        )
    if tuple(lses.shape) != tuple(outputs.shape[:-1]):
        raise ValueError(
            f"lses {tuple(lses.shape)} must be the shape of outputs "
            f"{tuple(outputs.shape)} without its last axis (P, ...)"
        )
    if lses.isnan().any():
        raise ValueError("lses hold NaN: an LSE is a number or +-inf")
    bad = ~outputs.isfinite().all(dim=-1) & lses.isfinite()
    if bad.any():
        index = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(
            f"outputs{list(index)} holds NaN or inf, but its LSE is "
            f"finite (a partial over some keys)"
        )
    wide = torch.promote_types(
        torch.promote_types(outputs.dtype, lses.dtype), torch.float32
    )

    def to_caller(output, lse):
        output = output.to(out_dtype)
        if as_numpy:
            return output.numpy(), lse.numpy()
        return output, lse

    return outputs.to(wide), lses.to(wide), to_caller


def split_kv_decode(q, k, v, num_splits, scale):
    """q (..., Tq, d), k, v (..., Tk, d) with Tq, Tk >= 1, and
    num_splits an int >= 1, for split_kv_decode. Returns the shape of
    the scores, (..., Tq, Tk), batch axes broadcast."""
    num_splits = as_index(num_splits, "num_splits")
    if num_splits < 1:
        raise ValueError(f"num_splits must be at least 1, got {num_splits}")
    float_tensors(q=q, k=k, v=v)
    score_scale(scale)
    shape, _ = grouped_scores_shape(q.shape, k.shape, v.shape)
    if min(shape[-2:]) < 1:
        raise ValueError(
            f"split_kv_decode needs one query and one key at least, got "
            f"q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    return shape


def _int_values(value, name):
    """A 1-D sequence of ints (list, array, tensor) as an int64 tensor."""
    if is_tensor(value):
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got {value.dtype}")
        values = value.detach().cpu().long()
    else:
        numbers = np.asarray(value)
        if numbers.size == 0:
            numbers = numbers.astype(np.int64)
        if numbers.dtype.kind not in "iu":
            raise TypeError(
                f"{name} must be integers, got {type(value).__name__} "
                f"{value!r:.60}"
            )
        values = torch.as_tensor(numbers.astype(np.int64))
    if values.dim() != 1:
        raise ValueError(
            f"{name} must be 1-D, got shape {tuple(values.shape)}"
        )
    return values


def tree_mask(parents, prefix_length):
    """Draft-tree parents, each -1 or an earlier node; returns a list."""
    rule_int(prefix_length, "prefix_length", 0)
    parents = _int_values(parents, "parents").tolist()
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(
                f"parents[{i}] = {parent}: a parent index comes before "
                f"its child (-1 .. {i - 1}; -1: the last prefix token)"
            )
    return parents


def verify_greedy(draft_tokens, target_logits):
    """Draft tokens (n,) and finite target logits (n + 1, vocab)."""
    draft = _int_values(draft_tokens, "draft_tokens")
    logits = _real(target_logits, "target_logits")
    n = len(draft)
    if logits.dim() != 2 or logits.shape[0] != n + 1 or logits.shape[1] < 1:
        raise ValueError(
            f"target_logits must be (n + 1, vocab) = ({n + 1}, vocab) for "
            f"{n} draft tokens, got {tuple(logits.shape)}"
        )
    if not logits.isfinite().all():
        raise ValueError("target_logits hold NaN or inf")
    vocab = logits.shape[1]
    if n and (draft.min() < 0 or draft.max() >= vocab):
        raise ValueError(
            f"draft_tokens must lie in 0 .. {vocab - 1} (the vocabulary "
            f"of target_logits), got {draft.tolist()}"
        )
    return draft.to(logits.device), logits


def block_table(cache, seq_id):
    """A sequence the cache holds: returns its key."""
    return _known(cache, seq_id)


def length(cache, seq_id):
    """A sequence the cache holds: returns its key."""
    return _known(cache, seq_id)


def gather(cache, seq_id):
    """A sequence the cache holds: returns its key."""
    return _known(cache, seq_id)


def free(cache, seq_id):
    """A sequence the cache holds: returns its key."""
    return _known(cache, seq_id)
