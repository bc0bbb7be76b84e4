# A small PyTorch training loop nobody marked (GPU if there is one), about SECONDS long.
import sys, time, torch
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 8
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
t0 = time.monotonic(); steps = 0
while time.monotonic() - t0 < secs:
    x = torch.randn(256, 512, device=dev); y = torch.randint(0, 10, (256,), device=dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step(); steps += 1
    if steps % 50 == 0: print(f"step {steps} loss {loss.item():.3f}", flush=True)
print(f"train steps={steps} elapsed={time.monotonic() - t0:.2f} dev={dev}")
