"""Reference for muon_torch_test.cc: Muon as Keller Jordan's muon.py writes it (momentum lerp,
Nesterov lerp, Newton-Schulz quintic with (3.4445, -4.7750, 2.0315), decoupled weight decay),
with two differences Atoll makes on purpose: the iteration runs in fp32 (the reference casts to
bf16) and the update is scaled by 0.2 * sqrt(max(rows, cols)) (Moonlight, Liu et al. 2025)
instead of sqrt(max(1, rows / cols)). Exit code 77 means torch is not installed (test skips).

in file:  i32 rows, cols, steps, ns_steps, f64 lr, momentum, weight_decay,
          f32 p0[rows*cols], f32 g[steps][rows*cols]
out file: f32 p[rows*cols], m[rows*cols]
"""
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)


def newton_schulz5(G, steps):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.clone()
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.mT
    return X


def main(src, dst):
    with open(src, "rb") as f:
        rows, cols, steps, ns_steps = struct.unpack("<4i", f.read(16))
        lr, beta, wd = struct.unpack("<3d", f.read(24))
        n = rows * cols
        p0 = np.frombuffer(f.read(4 * n), dtype=np.float32).reshape(rows, cols)
        grads = np.frombuffer(f.read(4 * n * steps), dtype=np.float32).reshape(steps, rows, cols)
    torch.set_num_threads(1)
    p = torch.from_numpy(p0.copy())
    m = torch.zeros_like(p)
    for s in range(steps):
        g = torch.from_numpy(grads[s].copy())
        m.lerp_(g, 1 - beta)
        update = g.lerp_(m, beta)
        update = newton_schulz5(update, ns_steps)
        update = update * (0.2 * max(rows, cols) ** 0.5)
        p.mul_(1 - lr * wd)
        p.add_(update, alpha=-lr)
    with open(dst, "wb") as f:
        for t in (p, m):
            f.write(t.numpy().astype(np.float32).tobytes())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
