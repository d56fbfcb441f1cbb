"""nanoGPT-style micro-step accumulation and a GAN with two optimizers: both correct."""

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
scaler = torch.amp.GradScaler("cuda")
grad_accum_steps = 4

for it in range(100):
    for micro_step in range(grad_accum_steps):
        x = torch.randn(8, 64)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).pow(2).mean() / grad_accum_steps
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


netG = nn.Sequential(nn.Linear(16, 64), nn.Tanh())
netD = nn.Sequential(nn.Linear(64, 1))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
criterion = nn.BCEWithLogitsLoss()

for real in torch.randn(10, 32, 64):
    netD.zero_grad()
    fake = netG(torch.randn(32, 16))
    errD = criterion(netD(real), torch.ones(32, 1)) + criterion(netD(fake.detach()), torch.zeros(32, 1))
    errD.backward()
    optD.step()

    netG.zero_grad()
    errG = criterion(netD(fake), torch.ones(32, 1))
    errG.backward()
    optG.step()
