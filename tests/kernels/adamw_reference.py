"""Reference for adamw_torch_test.cc: runs torch.optim.AdamW (foreach=False) on the inputs the
test wrote and writes p, m, v back. Exit code 77 means torch is not installed (test skips).

in file:  u64 n, i32 steps, f64 lr, beta1, beta2, eps, weight_decay, f32 p0[n], f32 g[steps][n]
out file: f32 p[n], m[n], v[n]
"""
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)


def main(src, dst):
    with open(src, "rb") as f:
        n, steps = struct.unpack("<Qi", f.read(12))
        lr, b1, b2, eps, wd = struct.unpack("<5d", f.read(40))
        p0 = np.frombuffer(f.read(4 * n), dtype=np.float32)
        grads = np.frombuffer(f.read(4 * n * steps), dtype=np.float32).reshape(steps, n)
    torch.set_num_threads(1)
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    for s in range(steps):
        p.grad = torch.from_numpy(grads[s].copy())
        opt.step()
    state = opt.state[p]
    with open(dst, "wb") as f:
        for t in (p.detach(), state["exp_avg"], state["exp_avg_sq"]):
            f.write(t.numpy().astype(np.float32).tobytes())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
