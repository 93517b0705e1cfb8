"""A stand-in CUDA device for tests without a GPU: ``.to("cuda")`` returns a CPU tensor of the subclass ``OnGpu``
(ops propagate it), ``.to("cpu")``/``.cpu()`` a plain one, so a test can tell which tensors code placed "on the GPU"."""

import torch


class OnGpu(torch.Tensor):
    """A CPU tensor standing for one on the GPU."""


def plain(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


def _to(self, *args, **kwargs):
    dev = kwargs.pop("device", None)
    rest = []
    for a in args:
        if isinstance(a, (str, torch.device)):
            dev = a
        else:
            rest.append(a)
    out = torch._C.TensorBase.to(plain(self), *rest, **kwargs)
    if dev is None:
        return out.as_subclass(type(self))
    return out.as_subclass(OnGpu if torch.device(dev).type == "cuda" else torch.Tensor)


def _cpu(self, *args, **kwargs):
    return torch._C.TensorBase.cpu(plain(self), *args, **kwargs)


def install(monkeypatch, name: str = "NVIDIA H100 80GB HBM3") -> None:
    """torch reports one CUDA device ``name`` (sm_90) and places its tensors as above."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.Tensor, "to", _to)
    monkeypatch.setattr(torch.Tensor, "cpu", _cpu)
