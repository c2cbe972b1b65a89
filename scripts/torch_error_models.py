# Models that make LibTorch throw exceptions other than c10::Error, for
# tests/experiments/test_torch_errors.cpp (issue #24): usage: torch_error_models.py DIR
import sys
import torch
import torch.nn as nn


d = sys.argv[1]
torch.manual_seed(0)


class Pair(nn.Module):
    def forward(self, x):
        return x, x


class Named(nn.Module):
    def forward(self, x):
        return {"a": x}


class Raises(nn.Module):
    def forward(self, x):
        if bool(x.sum() > -1e30):
            raise RuntimeError("this module always raises")
        return x


torch.jit.script(nn.Sequential(nn.Flatten(), nn.Linear(10, 2))).save(d + "/narrow.ts")
torch.jit.script(nn.Sequential(nn.ReLU(), Pair())).save(d + "/tuple.ts")
torch.jit.script(nn.Sequential(nn.ReLU(), Named())).save(d + "/dict.ts")
torch.jit.script(nn.Sequential(nn.ReLU(), Raises())).save(d + "/raises.ts")
# A whole model pickled (not a state dict), as torch.save(model) writes it.
torch.save(nn.Sequential(nn.Conv2d(1, 2, 3)), d + "/whole_model.pth")
