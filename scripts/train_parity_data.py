#!/usr/bin/env python3
"""The data of scripts/train_parity.py: the files MegaTrain reads, and the rows its data sources
serve from them, replicated (token-file windows, eod documents, the splitmix64 epoch shuffle and
first-fit packing of engine/data/packing.cc), so the PyTorch replay trains on the same rows."""
import json

import numpy as np

VOCAB = 256
MASK64 = (1 << 64) - 1


def markov_tokens(n, seed, eod=None, eod_every=(20, 70)):
    """A deterministic, learnable token stream; eod inserted between documents when given."""
    rng = np.random.default_rng(seed)
    succ = rng.integers(1, VOCAB, size=(VOCAB, 3))
    out, t = [], int(rng.integers(1, VOCAB))
    next_eod = int(rng.integers(*eod_every)) if eod is not None else -1
    for i in range(n):
        if eod is not None and i == next_eod:
            out.append(eod)
            next_eod = i + int(rng.integers(*eod_every))
            t = int(rng.integers(1, VOCAB))
            continue
        out.append(t)
        t = int(succ[t, int(rng.integers(0, 3))])
    return np.array(out, dtype=np.uint16)


def token_file_rows(tokens, rows, T):
    """engine/data/token_file.cc: row k is the window [k*T, k*T + T + 1), wrapping."""
    windows = (len(tokens) - 1) // T
    inp, tgt = [], []
    for k in range(rows):
        s = (k % windows) * T
        inp.append(tokens[s:s + T].astype(np.int64))
        tgt.append(tokens[s + 1:s + T + 1].astype(np.int64))
    return np.stack(inp), np.stack(tgt)


def mark_documents(inp, eod):
    """engine/data/documents.cc: a row starts a document; so does the token after an eod input."""
    pos = np.zeros_like(inp)
    for r in range(inp.shape[0]):
        for t in range(inp.shape[1]):
            pos[r, t] = 0 if t == 0 or inp[r, t - 1] == eod else pos[r, t - 1] + 1
    return pos


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def epoch_order(n, seed, epoch):
    order = list(range(n))
    state = (seed ^ ((0xD1B54A32D192ED03 * (epoch + 1)) & MASK64)) & MASK64
    for i in range(n, 1, -1):
        state, r = splitmix64(state)
        j = r % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def barren_pieces(examples, T):
    """engine/data/packing.cc barren_pieces: pieces of examples longer than T with no counted target."""
    out = set()
    for e, (ids, loss) in enumerate(examples):
        if len(ids) <= T:
            continue
        if all(loss[1:]):
            continue  # every target counts: none (and nothing read)
        for b in range(0, len(ids), T):
            last = min(b + T, len(ids) - 1)
            if last > b and not any(loss[b + 1:last + 1]):  # an example's last token alone is kept
                out.add((e, b))
    return out


def pack_epoch(lengths, T, seed, epoch, window=64, barren=frozenset()):
    """engine/data/packing.cc pack_epoch (split long examples, first fit into a window of rows)."""
    pieces = []
    for e in epoch_order(len(lengths), seed, epoch):
        n = lengths[e]
        for b in range(0, n, T):
            if (e, b) not in barren:
                pieces.append((e, b, min(n - b, T)))
    rows, room, open_rows = [], [], []
    for p in pieces:
        fit = next((r for r in open_rows if room[r] >= p[2]), None) if window > 0 else None
        if fit is None:
            rows.append([])
            room.append(T)
            open_rows.append(len(rows) - 1)
            if len(open_rows) > max(1, window):
                open_rows.pop(0)
            fit = len(rows) - 1
        rows[fit].append(p)
        room[fit] -= p[2]
    return rows


def example_rows(examples, nrows, T, seed, window=64):
    """engine/data/example_source.cc + packing.cc fill_row: epoch after epoch (window 0: packing
    off, each piece its own row)."""
    lengths = [len(ids) for ids, _ in examples]
    inp = np.zeros((nrows, T), np.int64)
    tgt = -np.ones((nrows, T), np.int64)
    pos = np.zeros((nrows, T), np.int64)
    barren = barren_pieces(examples, T)
    epoch, layout, done = 0, pack_epoch(lengths, T, seed, 0, window, barren), 0
    for r in range(nrows):
        while done >= len(layout):
            done -= len(layout)
            epoch += 1
            layout = pack_epoch(lengths, T, seed, epoch, window, barren)
        at = 0
        for e, b, n in layout[done]:
            ids, loss = examples[e]
            more = 1 if b + n < len(ids) else 0
            for t in range(n):
                inp[r, at + t] = ids[b + t]
                counted = t + 1 < n + more and loss[b + t + 1]
                tgt[r, at + t] = ids[b + t + 1] if counted else -1
                pos[r, at + t] = t
            at += n
        for t in range(at, T):
            pos[r, t] = t - at
        done += 1
    return inp, tgt, pos


def sft_examples(seed, n=24):
    """prompt/completion lines and what the byte tokenizer makes of them (no EOS)."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz "
    lines, examples = [], []
    for i in range(n):
        plen = int(rng.integers(2, 20))
        clen = int(rng.integers(1, 30)) if i % 7 else int(rng.integers(40, 60))  # some longer than seq_len
        prompt = "Q" + "".join(letters[int(k)] for k in rng.integers(0, len(letters), plen)) + ":"
        completion = "".join(letters[int(k)] for k in rng.integers(0, len(letters), clen)) + "."
        lines.append(json.dumps({"prompt": prompt, "completion": completion}))
        p, c = list(prompt.encode()), list(completion.encode())
        examples.append((p + c, [0] * len(p) + [1] * len(c)))
    return lines, examples
