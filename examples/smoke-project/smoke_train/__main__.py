import sys

import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam

from . import REVISION


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = x @ torch.randn(16, 1)
    model = torch.nn.Linear(16, 1)
    opt = DeepSpeedCPUAdam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"smoke_train revision {REVISION}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return 0 if losses[-1] < losses[0] * 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
