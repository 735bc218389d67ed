"""Write the synthetic demo predictions (demo/predictions/<model-key>.jsonl).

  demo-perfect    the reference code of every snippet, in three answer styles
                  (bare code, prose + fenced block, prose + a draft block + final block)
  demo-empty      an empty answer for every snippet
  demo-imperfect  reference code for most snippets, hand-written wrong answers
                  (IMPERFECT below) for the rest, covering every error category
  demo-imperfect.without-paper
                  the same model prompted without the paper: demo-imperfect's
                  answers plus the guesses in WITHOUT_PAPER below

Completions carry the exact indentation of the snippet; the extracted lines
replace the lines between the two tags as given. Run from anywhere:
    python demo/tools/make_predictions.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import p2c  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent
OUT = DEMO / "predictions"

# (paper, snippet) -> (expected category, completion). Indentation is part of the answer.
IMPERFECT = {
    ("focal-loss", "p_t"): ("syntax", (
        "I compute p_t from the sigmoid output:\n\n"
        "```python\n"
        "p_t = p * targets + (1.0 - p) * (1.0 - targets)\n"
        "```\n")),
    ("rope", "attention scores"): ("name", (
        "```python\n"
        "    scores = q_rot @ np.swapaxes(k_rotated, -1, -2) / np.sqrt(q.shape[-1])\n"
        "```")),
    ("rope", "interleave angles"): ("type", (
        "Each angle is used by both members of its pair, so repeat it:\n"
        "```python\n"
        "    angles = np.repeat(angles, axis=-1)\n"
        "```")),
    ("focal-loss", "stable sigmoid"): ("attribute", (
        "```python\n"
        "    out = np.sigmoid(x)\n"
        "```")),
    ("lion", "init state"): ("index", (
        "```python\n"
        "        self.state = {name: {\"momentum\": np.zeros_like(p)} for name, p in params.items()}\n"
        "```")),
    ("minp-sampling", "tempered softmax"): ("import", (
        "Use the helper module for a stable softmax:\n"
        "```python\n"
        "    from minp_utils import stable_softmax\n"
        "    return stable_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=-1)\n"
        "```")),
    ("lion", "momentum update"): ("logic", (
        "```python\n"
        "            m *= self.beta1\n"
        "            m += (1.0 - self.beta1) * g\n"
        "```")),
    ("minp-sampling", "scaled threshold"): ("logic", (
        "    p_max = probs.max(axis=-1, keepdims=True)\n"
        "    threshold = p_base\n")),
    ("focal-loss", "normalise by positives"): ("logic", (
        "```python\n"
        "    num_valid = max(1, int(valid.sum()))\n"
        "    return total / num_valid\n"
        "```")),
    ("rope", "causal masking"): ("logic", (
        "```python\n"
        "        scores = np.where(np.triu(np.ones((seq_len, seq_len), dtype=bool)), scores, -np.inf)\n"
        "```")),
    ("lion", "linear warmup"): ("timeout", (
        "Accumulate the warm-up increments step by step:\n"
        "```python\n"
        "        lr = 0.0\n"
        "        i = 0\n"
        "        while i <= step:\n"
        "            lr += base_lr / warmup_steps\n"
        "        return lr\n"
        "```")),
    ("focal-loss", "prior initialisation"): ("crash", (
        "```python\n"
        "    import os, signal\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n"
        "```")),
    ("lion", "cosine decay"): ("other", (
        "```python\n"
        "    progress = (step - warmup_steps) / (total_steps - warmup_steps)\n"
        "    progress = min(progress, 1.0)\n"
        "    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))\n"
        "    final_lr = base_lr * final_lr_ratio\n"
        "    return final_lr + (base_lr - final_lr) * cosine\n"
        "```")),
    ("focal-loss", "log p_t gather"): ("index", (
        "```python\n"
        "    log_p_t = log_probs[np.arange(len(labels)), labels + 1]\n"
        "```")),
    # correct answers written differently from the reference
    ("rope", "rotate pairs"): ("pass", (
        "Swap each pair and negate the new first element:\n"
        "```python\n"
        "    pairs = x.reshape(*x.shape[:-1], -1, 2)\n"
        "    out = np.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)\n"
        "```")),
    ("minp-sampling", "renormalise"): ("pass", (
        "```python\n"
        "    total = np.sum(filtered, axis=-1, keepdims=True)\n"
        "    return filtered / total\n"
        "```")),
}


# The imperfect model prompted without the paper (`tasks --without-paper`): the same answers, plus
# guesses where the paper's own choices matter (for the paper-ablation page).
# (paper, snippet) -> (expected category, completion)
WITHOUT_PAPER = {
    ("rope", "inverse frequencies"): ("logic", (
        "Standard sinusoidal frequencies:\n"
        "```python\n"
        "    exponents = np.arange(0, dim, 2, dtype=np.float64) / (dim - 2)\n"
        "    inv_freq = 1.0 / (base ** exponents)\n"
        "```")),
    ("lion", "interpolation"): ("logic", (
        "```python\n"
        "            c = self.beta2 * m + (1.0 - self.beta2) * g\n"
        "```")),
    ("lion", "decoupled weight decay"): ("logic", (
        "```python\n"
        "            p *= 1.0 - self.weight_decay\n"
        "```")),
    ("focal-loss", "modulating factor"): ("logic", (
        "```python\n"
        "    loss = ce * (1.0 - p_t)\n"
        "```")),
    ("focal-loss", "alpha balancing"): ("logic", (
        "```python\n"
        "        loss = alpha * loss\n"
        "```")),
}


def perfect_answer(snippet, index):
    code = "\n".join(snippet.code)
    style = index % 3
    if style == 0:
        return code
    if style == 1:
        return f"Here is the implementation of `{snippet.name}`:\n\n```python\n{code}\n```\n"
    draft = snippet.indent + "raise NotImplementedError  # draft"
    return (f"A first sketch:\n\n```python\n{draft}\n```\n\n"
            f"Refined, final version:\n\n```python\n{code}\n```\n")


def all_snippets():
    for paper in p2c.load_papers(DEMO):
        for snip in p2c.paper_snippets(DEMO, paper):
            yield paper["id"], snip


def record(paper_id, snip, completion):
    return {"paper": paper_id, "snippet": snip.name, "file": snip.file, "completion": completion}


def main():
    OUT.mkdir(exist_ok=True)
    perfect, empty, imperfect, without_paper = [], [], [], []
    seen = set()
    for index, (paper_id, snip) in enumerate(all_snippets()):
        perfect.append(record(paper_id, snip, perfect_answer(snip, index)))
        empty.append(record(paper_id, snip, ""))
        key = (paper_id, snip.name)
        if key in IMPERFECT:
            seen.add(key)
            imperfect.append(record(paper_id, snip, IMPERFECT[key][1]))
        else:
            imperfect.append(record(paper_id, snip, perfect_answer(snip, index + 1)))
        if key in WITHOUT_PAPER:
            seen.add(key)
            without_paper.append(record(paper_id, snip, WITHOUT_PAPER[key][1]))
        else:
            without_paper.append(imperfect[-1])
    unknown = (set(IMPERFECT) | set(WITHOUT_PAPER)) - seen
    if unknown:
        raise SystemExit(f"IMPERFECT names unknown snippets: {sorted(unknown)}")
    for key, rows in (("demo-perfect", perfect), ("demo-empty", empty), ("demo-imperfect", imperfect),
                      ("demo-imperfect.without-paper", without_paper)):
        with open(OUT / f"{key}.jsonl", "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"wrote predictions/{key}.jsonl ({len(rows)} lines)")


if __name__ == "__main__":
    main()
