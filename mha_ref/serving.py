"""Attention in a server: a paged KV cache, packed batches, merged
partial results, prefix sharing and speculative verification.

A server keeps keys and values in fixed-size blocks found through a
block table (``PagedKVCache``, ``paged_attention``), packs requests of
different lengths into one batch (``varlen_attention``, flash-attn's
``cu_seqlens``), splits one query's keys and merges the partial
results by their log-sum-exp (``merge_partials``, ``split_kv_decode``)
and checks a draft model's tokens in one pass (``tree_mask``,
``verify_greedy``). The attention functions (``paged_attention``,
``varlen_attention``, ``split_kv_decode``) each equal
torch_ref.attention run on the logical sequence; masks are boolean,
True = blocked.
"""

import itertools
import math

import torch

from mha_ref import tiled, torch_ref
from mha_ref.guards import serving as check


# --8<-- [start:paged-cache-class]
class PagedKVCache:
    """Keys and values in a pool of fixed-size blocks, one block table
    per sequence: logical block j of a sequence is physical block
    ``block_table(seq_id)[j]``.

    The pool holds (num_blocks, n_kv_heads, block_size, d_head) keys
    and as many values. A block shared by several sequences (``fork``)
    counts its users; a sequence that writes into a shared block first
    copies it (copy on write).
    """

    def __init__(
        self, num_blocks, block_size, n_kv_heads, d_head, dtype=torch.float32
    ):
        check.paged_kv_cache(num_blocks, block_size, n_kv_heads, d_head, dtype)
        self.block_size, self.n_kv_heads, self.d_head = (
            block_size,
            n_kv_heads,
            d_head,
        )
        shape = (num_blocks, n_kv_heads, block_size, d_head)
        self.keys = torch.zeros(shape, dtype=dtype)  # the pool
        self.values = torch.zeros(shape, dtype=dtype)
        self.free_blocks = list(range(num_blocks))  # taken from the front
        self.users = [0] * num_blocks  # sequences reading each block
        self.tables, self.lengths = {}, {}  # per sequence

    @property
    def num_blocks(self):
        return self.keys.shape[0]

    @property
    def dtype(self):
        return self.keys.dtype

    @property
    def num_free_blocks(self):
        return len(self.free_blocks)

    def block_table(self, seq_id):
        """The physical blocks of a sequence, in logical order."""
        return list(self.tables[check.block_table(self, seq_id)])

    def length(self, seq_id):
        """How many positions the sequence holds."""
        return self.lengths[check.length(self, seq_id)]

    # --8<-- [start:paged-cache-append]
    def append(self, seq_id, k, v):
        """Write k, v (n_kv_heads, T_new, d_head) after the sequence's
        positions, starting it if new. Too few free blocks: RuntimeError,
        and nothing changes."""
        seq_id, k, v = check.append(self, seq_id, k, v)
        table = list(self.tables.get(seq_id, []))
        n, t_new, bs = self.lengths.get(seq_id, 0), k.shape[1], self.block_size
        room = -n % bs  # free slots in the last block
        shared = room > 0 and t_new > 0 and self.users[table[-1]] > 1
        # a shared, partly filled last block is copied before writing
        needed = int(shared) + math.ceil(max(t_new - room, 0) / bs)
        if needed > len(self.free_blocks):
            free = len(self.free_blocks)
            raise RuntimeError(
                f"append to sequence {seq_id!r} needs {needed} blocks but "
                f"{free} are free ({free} free of {self.num_blocks})"
            )
        if shared:  # copy on write: the others keep the old block
            old, new = table[-1], self.free_blocks.pop(0)
            self.keys[new], self.values[new] = self.keys[old], self.values[old]
            self.users[old] -= 1
            self.users[new] = 1
            table[-1] = new
        for _ in range(needed - int(shared)):  # fresh blocks at the end
            block = self.free_blocks.pop(0)
            self.users[block] = 1
            table.append(block)
        slots = torch.arange(n, n + t_new)  # logical positions written
        blocks = torch.tensor(table, dtype=torch.long)[slots // bs]
        self.keys[blocks, :, slots % bs] = k.transpose(0, 1)  # (T, H_kv, d)
        self.values[blocks, :, slots % bs] = v.transpose(0, 1)
        self.tables[seq_id], self.lengths[seq_id] = table, n + t_new
        # --8<-- [end:paged-cache-append]

    # --8<-- [start:paged-cache-gather]
    def gather(self, seq_id):
        """The sequence's keys and values, (n_kv_heads, length, d_head)
        each, read block by block through its table."""
        seq_id = check.gather(self, seq_id)
        table = torch.tensor(self.tables[seq_id], dtype=torch.long)
        n = self.lengths[seq_id]
        slots = (self.n_kv_heads, len(table) * self.block_size, self.d_head)
        k = self.keys[table].transpose(0, 1)  # (H_kv, n_blocks, bs, d)
        v = self.values[table].transpose(0, 1)
        k = k.reshape(slots)[:, :n]  # (H_kv, n, d): the last block's rest cut
        v = v.reshape(slots)[:, :n]
        return k, v
        # --8<-- [end:paged-cache-gather]

    # --8<-- [start:paged-cache-share]
    def fork(self, parent_id, child_id):
        """A new sequence that shares every block of ``parent_id``."""
        parent_id, child_id = check.fork(self, parent_id, child_id)
        for block in self.tables[parent_id]:
            self.users[block] += 1  # one more reader, no copy
        self.tables[child_id] = list(self.tables[parent_id])
        self.lengths[child_id] = self.lengths[parent_id]

    def free(self, seq_id):
        """Forget a sequence; blocks no other sequence reads are free."""
        seq_id = check.free(self, seq_id)
        for block in self.tables.pop(seq_id):
            self.users[block] -= 1
            if self.users[block] == 0:
                self.free_blocks.append(block)
        del self.lengths[seq_id]
        # --8<-- [end:paged-cache-share]

    # --8<-- [end:paged-cache-class]


# --8<-- [start:paged-attention]
def paged_attention(q, cache, seq_ids, *, scale=None):
    """One decoding step: q (N, H, d_head), query i against sequence
    seq_ids[i] of the cache. Returns (N, H, d_head).

    Each sequence's blocks are read through its table into one padded
    batch; slots past a sequence's length are masked.
    """
    seq_ids = check.paged_attention(q, cache, seq_ids, scale)
    tables = [cache.tables[s] for s in seq_ids]
    width = max(len(t) for t in tables)  # blocks of the longest sequence
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    n, h_kv, bs = len(seq_ids), cache.n_kv_heads, cache.block_size
    d = cache.d_head
    k = cache.keys[padded].transpose(1, 2)  # (N, H_kv, width, bs, d)
    v = cache.values[padded].transpose(1, 2)
    k = k.reshape(n, h_kv, width * bs, d).to(q.dtype)  # (N, H_kv, S, d)
    v = v.reshape(n, h_kv, width * bs, d).to(q.dtype)
    lengths = torch.tensor([cache.lengths[s] for s in seq_ids])  # (N,)
    padding = torch.arange(width * bs) >= lengths[:, None]  # (N, S)
    out, _ = torch_ref.attention(
        q[:, :, None, :], k, v, padding[:, None, None, :], scale=scale
    )  # (N, H, 1, d): H // H_kv query heads per key/value head
    return out[:, :, 0, :]  # (N, H, d)
    # --8<-- [end:paged-attention]


# --8<-- [start:varlen-attention]
def varlen_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=True, scale=None
):
    """Packed sequences: q (total_q, H, d), k and v (total_k, H_kv, d);
    sequence i owns rows cu_seqlens_q[i]:cu_seqlens_q[i + 1] of q and
    cu_seqlens_k[i]:cu_seqlens_k[i + 1] of k and v. Returns
    (total_q, H, dv). With causal, Lq queries over Lk keys align at the
    bottom right: query j sees keys up to j + Lk - Lq.
    """
    lq, lk = check.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale
    )  # (B,) lengths each
    seq = torch.arange(len(lq))  # (B,)
    q_seq, k_seq = seq.repeat_interleave(lq), seq.repeat_interleave(lk)
    # positions inside each sequence; a query sits Lk - Lq further on
    q_pos = torch.arange(len(q_seq)) - (lq.cumsum(0) - lq)[q_seq]
    q_pos = q_pos + (lk - lq)[q_seq]  # (total_q,)
    k_pos = torch.arange(len(k_seq)) - (lk.cumsum(0) - lk)[k_seq]
    blocked = q_seq[:, None] != k_seq[None, :]  # another sequence's keys
    if causal:
        blocked = blocked | (k_pos[None, :] > q_pos[:, None])
    if len(q_seq) == 0:  # every sequence without queries
        return q.new_zeros((0, q.shape[1], v.shape[-1]))
    out, _ = torch_ref.attention(
        q.transpose(0, 1),  # (H, total_q, d)
        k.transpose(0, 1),  # (H_kv, total_k, d)
        v.transpose(0, 1),
        blocked,  # (total_q, total_k), True = blocked
        scale=scale,
    )
    return out.transpose(0, 1)  # (total_q, H, dv)
    # --8<-- [end:varlen-attention]


# --8<-- [start:merge-partials]
def merge_partials(outputs, lses):
    """Attention over the union of P disjoint key sets, from each set's
    output (P, ..., d) and natural-log LSE (P, ...).

    An LSE of -inf or +inf marks a partial over no keys: it adds
    nothing. All empty: output 0 and LSE -inf. Returns (output, lse).
    """
    outputs, lses, to_caller = check.merge_partials(outputs, lses)
    return to_caller(*_merge(outputs, lses))


def _merge(outputs, lses):
    # unchecked: split_kv_decode merges its own parts with it
    empty = lses.isinf()  # (P, ...): -inf (Flex), +inf (tiled pass)
    lses = lses.masked_fill(empty, -math.inf)  # one convention: -inf
    top = lses.amax(dim=0)  # (...): the largest LSE
    top = torch.where(top.isneginf(), 0.0, top)  # every partial empty
    # w_p = exp(L_p - max L): each partial's share of the total sum
    weights = torch.exp(lses - top)  # (P, ...); 0 where empty
    total = weights.sum(dim=0)  # (...)
    # o = sum_p w_p o_p / sum_p w_p
    kept = torch.where(empty[..., None], 0.0, outputs)  # (P, ..., d)
    merged = (weights[..., None] * kept).sum(dim=0)  # (..., d)
    merged = merged / torch.where(total > 0, total, 1.0)[..., None]
    lse = top + total.log()  # log(0) = -inf when every partial is empty
    return merged, lse
    # --8<-- [end:merge-partials]


# --8<-- [start:split-kv-decode]
def split_kv_decode(q, k, v, num_splits, *, scale=None):
    """Flash-decoding: the keys in num_splits contiguous parts, each
    part's output and LSE from the tiled pass, merged by merge_partials.

    q (..., Tq, d), k and v (..., Tk, d) as tiled_attention_torch takes
    them; a part may be empty. Returns (output (..., Tq, dv), lse).
    """
    *lead, tq, tk = check.split_kv_decode(q, k, v, num_splits, scale)
    wide = torch.promote_types(q.dtype, torch.float32)  # the merge's
    bounds = [i * tk // num_splits for i in range(num_splits + 1)]
    outputs, lses = [], []
    for start, end in itertools.pairwise(bounds):
        if start == end:  # no keys: the tiled pass's empty row
            out = q.new_zeros((*lead, tq, v.shape[-1]))  # (..., Tq, dv)
            lse = torch.full((*lead, tq), math.inf)  # (..., Tq)
        else:
            out, lse = tiled.tiled_attention_torch(
                q,
                k[..., start:end, :],
                v[..., start:end, :],
                return_lse=True,
                scale=scale,
            )
        outputs.append(out)
        lses.append(lse.to(wide))
    out, lse = _merge(torch.stack(outputs).to(wide), torch.stack(lses))
    return out.to(q.dtype), lse  # (..., Tq, dv), (..., Tq)
    # --8<-- [end:split-kv-decode]


# --8<-- [start:tree-mask]
def tree_mask(parents, prefix_length):
    """Tree attention for a draft tree: parents[i] is node i's parent
    (-1: a child of the last prefix token). Returns the boolean
    (N, prefix_length + N) mask, True = blocked: node i sees every
    prefix token, its ancestors and itself."""
    parents = check.tree_mask(parents, prefix_length)
    n = len(parents)
    sees = torch.zeros(n, n, dtype=torch.bool)  # (N, N) among the nodes
    for i, parent in enumerate(parents):
        if parent >= 0:  # a parent comes before its child
            sees[i] = sees[parent]  # everything the parent sees
        sees[i, i] = True  # and itself
    prefix = torch.zeros(n, prefix_length, dtype=torch.bool)  # all seen
    return torch.cat([prefix, ~sees], dim=1)  # (N, prefix_length + N)
    # --8<-- [end:tree-mask]


# --8<-- [start:verify-greedy]
def verify_greedy(draft_tokens, target_logits):
    """Greedy verification of n draft tokens with the target's logits
    at those n positions plus one, (n + 1, vocab).

    Returns (accepted, next_token): the longest prefix of the draft
    equal to the target's argmax, then the target's own token there.
    """
    draft, logits = check.verify_greedy(draft_tokens, target_logits)
    chosen = logits.argmax(dim=-1)  # (n + 1,): the target's tokens
    agree = draft == chosen[:-1]  # (n,)
    accepted = int(agree.long().cumprod(dim=0).sum())  # leading agreement
    return accepted, int(chosen[accepted])  # next: a fix, or a bonus
    # --8<-- [end:verify-greedy]
