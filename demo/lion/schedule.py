"""Learning-rate schedule used with Lion in the demo: linear warm-up, then cosine decay.

Part of the ResearchCodeBench Hub demo problem set.
"""
import math


def warmup_cosine_lr(step, base_lr, warmup_steps, total_steps, final_lr_ratio=0.0):
    """Learning rate at integer `step` (0-based).

    During the first `warmup_steps` steps the rate rises linearly to base_lr
    (reaching it at step warmup_steps - 1); it then follows a half cosine from
    base_lr down to base_lr * final_lr_ratio at `total_steps`, and stays there.
    """
    # <paper2code name="warmup cosine schedule">
    if step < warmup_steps:
        # <paper2code name="linear warmup">
        return base_lr * (step + 1) / warmup_steps
        # </paper2code name="linear warmup">
    # <paper2code name="cosine decay">
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(progress, 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    final_lr = base_lr * final_lr_ratio
    return final_lr + (base_lr - final_lr) * cosine
    # </paper2code name="cosine decay">
    # </paper2code name="warmup cosine schedule">
