#!/usr/bin/env python3
"""train_tiny_gpt.py -- train a small character-level GPT whose attention is a flashlab stage.

    python3 examples/train_tiny_gpt.py --stage 07 --steps 300 --compare
    python3 examples/train_tiny_gpt.py --stage 10 --window 32 --sinks --compare
    python3 examples/train_tiny_gpt.py --stage sdpa            # torch's attention only

The model is a decoder-only transformer (token and position embeddings, pre-norm blocks of causal
self-attention and a 4x GELU MLP, the output layer tied to the token embedding) trained with AdamW
on next-character prediction over examples/data/kjv_genesis_exodus.txt (see examples/data/README.md).

Attention comes from --stage: a flashlab stage ("06", "07", "10", ...) through
flashlab.torch.attention, whose backward pass is the stage's own, or "sdpa" for the reference:
torch's scaled_dot_product_attention, or, with --sinks, the same attention written out in plain
torch with one extra softmax column per head for the sink logit (SDPA has no sinks).

--window W and --sinks give the gpt-oss pattern: every other layer (layers 0, 2, ...) sees only the
last W positions, the others all of them, and every layer has one learned sink logit per head,
trained with the rest of the parameters.

--bidirectional is for a stage without a causal mask (stage 06): attention sees the whole
sequence, so next-character prediction would read its own answer; the objective becomes masked
characters instead (15% of the positions replaced by a mask token, predicted from both sides).

--compare trains the same model from the same seed on the same batches twice, with the stage and
with the reference, prints both losses side by side and the largest gap, and writes an SVG of the
two curves (--svg). Every float is float32, unless --attn-dtype bf16: then the attention alone (the
stage's and the reference's) takes q, k, v rounded to bf16, as a bf16 stage (12, 14) needs:

    python3 examples/train_tiny_gpt.py --stage 12 --device cuda --attn-dtype bf16 --compare

--device cuda runs a CUDA stage of the library on the GPU tensors in place (API version 2).
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

DEFAULT_DATA = os.path.join(HERE, "data", "kjv_genesis_exodus.txt")


# ---------------------------------------------------------------------------------------------
# Data: characters as token ids, random windows as batches.

class CharData:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.chars = sorted(set(text))
        index = {c: i for i, c in enumerate(self.chars)}
        self.ids = torch.tensor([index[c] for c in text], dtype=torch.long)

    @property
    def vocab_size(self):
        return len(self.chars)

    @property
    def mask_id(self):
        """The extra token that hides a character in the masked objective."""
        return len(self.chars)

    def batch(self, generator, batch_size, seq_len):
        """(inputs, targets), each (batch_size, seq_len): random windows and the next characters."""
        starts = torch.randint(0, len(self.ids) - seq_len - 1, (batch_size,), generator=generator)
        x = torch.stack([self.ids[s:s + seq_len] for s in starts.tolist()])
        y = torch.stack([self.ids[s + 1:s + seq_len + 1] for s in starts.tolist()])
        return x, y

    def masked_batch(self, generator, batch_size, seq_len, rate=0.15):
        """(inputs, targets) for the bidirectional objective: a random `rate` of the positions (at
        least one per batch) hold mask_id in the inputs; the targets are the hidden characters
        there and -100 (ignored by the loss) everywhere else."""
        x, _ = self.batch(generator, batch_size, seq_len)
        hidden = torch.rand(x.shape, generator=generator) < rate
        hidden[0, 0] |= not hidden.any()
        return x.masked_fill(hidden, self.mask_id), x.masked_fill(~hidden, -100)


# ---------------------------------------------------------------------------------------------
# Attention: a flashlab stage, or the reference in torch.

def window_mask(T, window, device, causal=True):
    """(T, T) bool, True where query i may see key j: j <= i when causal, and i - j < window when
    window > 0."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    keep = j <= i if causal else torch.ones(T, T, dtype=torch.bool, device=device)
    if window > 0:
        keep &= j > i - window
    return keep


def reference_attention(q, k, v, window, sinks, causal=True):
    """The attention a stage computes (causal or not, optional window, optional sink logits), in
    torch."""
    Hq, T = q.shape[1], q.shape[2]
    if k.shape[1] != Hq:  # GQA: each kv head serves Hq / Hkv query heads
        k = k.repeat_interleave(Hq // k.shape[1], dim=1)
        v = v.repeat_interleave(Hq // v.shape[1], dim=1)
    if sinks is None:
        if window > 0:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(T, window, q.device))
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~window_mask(T, window, q.device, causal), float("-inf"))
    sink_column = sinks.view(1, Hq, 1, 1).expand(q.shape[0], Hq, T, 1)
    # the sink joins each row's softmax with a zero value vector: it only takes a share of the mass
    p = torch.softmax(torch.cat([scores, sink_column], dim=-1), dim=-1)[..., :-1]
    return p @ v


def make_attention(stage, variant, causal, dtype=torch.float32):
    """attend(q, k, v, window, sinks) -> o for --stage. With dtype bfloat16 (--attn-dtype bf16) the
    attention alone runs in bf16, for the stage and for SDPA alike: q, k, v (and the sink logits)
    are rounded to bf16 on the way in and o is widened back; the rest of the model stays float32."""
    if stage == "sdpa":
        def attend(q, k, v, window, sinks):
            return reference_attention(q, k, v, window, sinks, causal)
    else:
        import flashlab.torch as flt

        def attend(q, k, v, window, sinks):
            return flt.attention(q, k, v, stage=stage, variant=variant, causal=causal, window=window, sinks=sinks)
    if dtype == torch.float32:
        return attend

    def attend_in(q, k, v, window, sinks):
        sinks = None if sinks is None else (sinks if stage != "sdpa" else sinks.to(dtype))
        return attend(q.to(dtype), k.to(dtype), v.to(dtype), window, sinks).float()
    return attend_in


# ---------------------------------------------------------------------------------------------
# The model.

class Block(torch.nn.Module):
    def __init__(self, cfg, window, attend):
        super().__init__()
        self.heads, self.kv_heads, self.window, self.attend = cfg.heads, cfg.kv_heads, window, attend
        self.head_dim = cfg.d_model // cfg.heads
        self.norm1 = torch.nn.LayerNorm(cfg.d_model)
        self.qkv = torch.nn.Linear(cfg.d_model, (cfg.heads + 2 * cfg.kv_heads) * self.head_dim)
        self.proj = torch.nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = torch.nn.LayerNorm(cfg.d_model)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(cfg.d_model, 4 * cfg.d_model), torch.nn.GELU(),
                                       torch.nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.sinks = torch.nn.Parameter(torch.zeros(cfg.heads)) if cfg.sinks else None

    def forward(self, x):
        B, T, C = x.shape
        sizes = [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim]
        q, k, v = self.qkv(self.norm1(x)).split(sizes, dim=-1)
        q = q.view(B, T, self.heads, self.head_dim).transpose(1, 2)      # (B, H, T, d): the golden layout
        k = k.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        o = self.attend(q, k, v, self.window, self.sinks)
        x = x + self.proj(o.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.norm2(x))


class TinyGPT(torch.nn.Module):
    def __init__(self, cfg, vocab_size, attend):
        super().__init__()
        # + the mask token for --bidirectional (only then, so causal runs keep their initial weights)
        self.tokens = torch.nn.Embedding(vocab_size + (1 if cfg.bidirectional else 0), cfg.d_model)
        self.positions = torch.nn.Embedding(cfg.seq_len, cfg.d_model)
        # gpt-oss: banded layers alternate with full ones
        self.blocks = torch.nn.ModuleList(Block(cfg, cfg.window if i % 2 == 0 else 0, attend)
                                          for i in range(cfg.layers))
        self.norm = torch.nn.LayerNorm(cfg.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, torch.nn.Linear) and m.bias is not None:
            torch.nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tokens.weight.T  # the output layer is the embedding, transposed


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# Training.

def learning_rate(step, cfg):
    """Linear warm-up over the first 10% of the steps, then a cosine down to a tenth."""
    warmup = max(1, cfg.steps // 10)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    return cfg.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def train(cfg, data, stage, log):
    """Trains one model with attention from `stage`; returns (losses per step, seconds, parameters)."""
    torch.manual_seed(cfg.seed)  # the same initial weights for every stage
    attend = make_attention(stage, cfg.variant, causal=not cfg.bidirectional,
                            dtype=torch.bfloat16 if cfg.attn_dtype == "bf16" else torch.float32)
    model = TinyGPT(cfg, data.vocab_size, attend).to(cfg.device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    batches = torch.Generator().manual_seed(cfg.seed)  # the same batches for every stage
    losses = []
    start = time.perf_counter()
    for step in range(cfg.steps):
        x, y = (data.masked_batch if cfg.bidirectional else data.batch)(batches, cfg.batch, cfg.seq_len)
        x, y = x.to(cfg.device), y.to(cfg.device)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise SystemExit(f"{stage}: loss is {losses[-1]} at step {step}")
        if log and (step % cfg.log_every == 0 or step == cfg.steps - 1):
            print(f"  {stage:>5s} step {step:4d}  loss {losses[-1]:.4f}  ({time.perf_counter() - start:6.1f} s)",
                  flush=True)
    return losses, time.perf_counter() - start, parameter_count(model)


# ---------------------------------------------------------------------------------------------
# The SVG of the two curves, written by hand.

def svg_curves(path, curves, title):
    """curves: [(label, colour, losses)]. A 720 x 420 plot of loss against step."""
    W, H, left, right, top, bottom = 720, 420, 60, 20, 40, 50
    steps = max(len(c[2]) for c in curves)
    lo = min(min(c[2]) for c in curves)
    hi = max(max(c[2]) for c in curves)
    lo, hi = math.floor(lo * 2) / 2, math.ceil(hi * 2) / 2
    px = lambda s: left + (W - left - right) * s / max(1, steps - 1)  # noqa: E731
    py = lambda v: top + (H - top - bottom) * (hi - v) / (hi - lo)    # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']
    ticks = 5
    for i in range(ticks + 1):  # horizontal grid and loss labels
        v = lo + (hi - lo) * i / ticks
        out.append(f'<line x1="{left}" y1="{py(v):.1f}" x2="{W - right}" y2="{py(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for i in range(ticks + 1):  # step labels
        s = round((steps - 1) * i / ticks)
        out.append(f'<text x="{px(s):.1f}" y="{H - bottom + 18}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{H / 2}" text-anchor="middle" transform="rotate(-90 16 {H / 2})">'
               f'training loss (nats/char)</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{W - left - right}" height="{H - top - bottom}" '
               f'fill="none" stroke="#444"/>')
    for n, (label, colour, losses) in enumerate(curves):
        points = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in enumerate(losses))
        dash = ' stroke-dasharray="6 4"' if n else ""
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>')
        y = top + 18 + 18 * n
        out.append(f'<line x1="{W - right - 190}" y1="{y - 4}" x2="{W - right - 160}" y2="{y - 4}" '
                   f'stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - right - 154}" y="{y}">{escape(label)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", required=True, help='a flashlab stage ("07") or "sdpa"')
    ap.add_argument("--variant", default="", help="a variant of the stage (flashlab list), default none")
    ap.add_argument("--window", type=int, default=0, help="W > 0: layers 0, 2, ... see the last W positions")
    ap.add_argument("--sinks", action="store_true", help="learned sink logits, one per head and layer")
    ap.add_argument("--bidirectional", action="store_true",
                    help="no causal mask (stage 06): masked-character objective instead of next character")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--attn-dtype", default="float32", choices=["float32", "bf16"],
                    help="bf16: the attention (stage and sdpa) on bf16 q, k, v; the model stays float32")
    ap.add_argument("--compare", action="store_true", help="train with the reference too, same seed")
    ap.add_argument("--svg", default="", help="where --compare writes its plot (default: loss_<stage>.svg)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=0, help="GQA: kv heads (default: --heads)")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    cfg = ap.parse_args(argv)
    cfg.kv_heads = cfg.kv_heads or cfg.heads
    if cfg.d_model % cfg.heads or cfg.heads % cfg.kv_heads:
        ap.error("--d-model must be a multiple of --heads, and --heads of --kv-heads")
    if cfg.bidirectional and cfg.window:
        ap.error("--window implies a causal mask: it cannot go with --bidirectional")
    if cfg.stage == "sdpa" and cfg.compare:
        ap.error("--compare compares a flashlab stage with sdpa: give --stage NN")
    return cfg


def main(argv):
    cfg = parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = CharData(cfg.data)
    features = ", ".join(f for f in (f"window {cfg.window} on even layers" if cfg.window else "",
                                     "learned sinks" if cfg.sinks else "",
                                     f"GQA {cfg.heads}/{cfg.kv_heads}" if cfg.kv_heads != cfg.heads else "") if f)
    print(f"data {os.path.relpath(cfg.data)}: {len(data.ids)} characters, vocabulary {data.vocab_size}; "
          f"{cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} heads, seq {cfg.seq_len}, batch {cfg.batch}, "
          f"{'bidirectional, masked characters' if cfg.bidirectional else 'causal'}"
          f"{', ' + features if features else ''}; {cfg.steps} steps, seed {cfg.seed}, "
          f"{torch.get_num_threads()} threads")
    runs = [cfg.stage] + (["sdpa"] if cfg.compare else [])
    results = {}
    for stage in runs:
        try:
            losses, seconds, params = train(cfg, data, stage, log=True)
        except Exception as e:
            if type(e).__name__ == "Unsupported" and "support causal" in str(e):
                raise SystemExit(f"{e}\nA stage without a causal mask trains with --bidirectional.") from None
            raise
        results[stage] = losses
        print(f"{stage}: {params / 1e6:.2f}M parameters, final loss {losses[-1]:.4f}, {seconds:.1f} s "
              f"({1e3 * seconds / cfg.steps:.0f} ms/step)", flush=True)
    if cfg.compare:
        report_comparison(cfg, results[cfg.stage], results["sdpa"])
    return 0


def report_comparison(cfg, mine, ref):
    gaps = [abs(a - b) for a, b in zip(mine, ref)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    print(f"\n step  stage {cfg.stage:>4s}   sdpa      gap")
    for s in range(0, cfg.steps, cfg.log_every):
        print(f" {s:4d}   {mine[s]:.4f}   {ref[s]:.4f}   {mine[s] - ref[s]:+.2e}")
    print(f" {cfg.steps - 1:4d}   {mine[-1]:.4f}   {ref[-1]:.4f}   {mine[-1] - ref[-1]:+.2e}")
    # how much the loss moves from one batch to the next: the scale that "within noise" means
    recent = range(max(1, len(ref) - 50), len(ref))
    jitter = sum(abs(ref[s] - ref[s - 1]) for s in recent) / max(1, len(recent))
    print(f"largest gap {gaps[worst]:.2e} at step {worst}; final gap {mine[-1] - ref[-1]:+.2e} "
          f"({100 * (mine[-1] - ref[-1]) / ref[-1]:+.2f} % of sdpa's final loss); "
          f"mean step-to-step change of the sdpa loss over the last 50 steps {jitter:.2e}")
    svg = cfg.svg or f"loss_{cfg.stage}.svg"
    label = f"stage {cfg.stage}" + (f" {cfg.variant}" if cfg.variant else "")
    title = f"tiny GPT, {cfg.steps} steps, seed {cfg.seed}: {label} vs sdpa (largest gap {gaps[worst]:.1e})"
    svg_curves(svg, [(label, "#d62728", mine), ("sdpa" + (" + sink column" if cfg.sinks else ""), "#1f77b4", ref)],
               title)
    print(f"wrote {svg}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
