"""The training workload: scikit-learn's bundled digits data and an MLP of chosen size.

No download is needed (`load_digits` ships with scikit-learn). The 1,797 8x8 images are
split once, with a fixed seed, into a stratified 80 % training / 20 % held-out test set;
the training set is then dealt out to the workers (worker j of N gets every N-th sample
of a fixed permutation), so data parallelism is real and every run sees the same data.

The model is a two-hidden-layer MLP 64 -> H -> H -> 10 with ReLU, whose parameter count
is H^2 + 76 H + 10; `hidden_width()` picks H for a requested size, from about 0.005 M
(H = 42) to 20 M (H = 4,434) parameters. Parameters and gradients travel as one flat
float32 tensor of `param_count` elements, i.e. `4 * param_count` bytes.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import nn

INPUTS = 64
CLASSES = 10
TEST_FRACTION = 0.2
SPLIT_SEED = 0
BYTES_PER_PARAM = 4  # float32


def hidden_width(model_size_m: float) -> int:
    """Hidden width H whose parameter count H^2 + 76 H + 10 is nearest `model_size_m` x 1e6."""
    target = model_size_m * 1e6
    b = INPUTS + 1 + 1 + CLASSES  # 76
    h = (-b + math.sqrt(b * b + 4 * (target - CLASSES))) / 2
    return max(1, round(h))


def build_model(model_size_m: float, seed: int) -> nn.Module:
    """The MLP for `model_size_m` million parameters, initialised from `seed`."""
    h = hidden_width(model_size_m)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(INPUTS, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                          nn.Linear(h, CLASSES))
    torch.random.set_rng_state(gen_state)
    return model


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Digits:
    """The digits data: a worker's training shard and the common held-out test set."""

    def __init__(self, worker: int, workers: int, batch_size: int, seed: int) -> None:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        data = load_digits()
        x = (data.data / 16.0).astype(np.float32)
        y = data.target.astype(np.int64)
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y)
        order = np.random.default_rng(SPLIT_SEED).permutation(len(x_train))
        mine = order[worker::workers]
        self.x = torch.from_numpy(x_train[mine])
        self.y = torch.from_numpy(y_train[mine])
        self.x_test = torch.from_numpy(x_test)
        self.y_test = torch.from_numpy(y_test)
        self.batch_size = min(batch_size, len(mine))
        self._rng = np.random.default_rng([seed, worker])
        self._perm = np.empty(0, dtype=np.int64)
        self._pos = 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next mini-batch of this worker's shard (reshuffled every epoch)."""
        if self._pos + self.batch_size > len(self._perm):
            self._perm = self._rng.permutation(len(self.x))
            self._pos = 0
        idx = torch.from_numpy(self._perm[self._pos:self._pos + self.batch_size])
        self._pos += self.batch_size
        return self.x[idx], self.y[idx]


class Trainer:
    """Gradient computation and evaluation on flat parameter vectors.

    The straggler slowdown is applied here: after the real forward/backward pass the
    worker sleeps (FACTOR - 1) x the measured compute time, so its compute takes FACTOR
    times longer without changing the maths. (Limiting a host's CPU is the runner's job.)

    `compute_floor_s` emulates a bigger model or a slower device: a gradient's compute
    is padded with a sleep to at least that many seconds (the real pass still runs), and
    the slowdown then multiplies the padded time. `emulated_s` is the last call's padding.
    With the default 0 nothing is padded.
    """

    def __init__(self, model: nn.Module, data: Digits, slowdown: float = 1.0,
                 compute_floor_s: float = 0.0) -> None:
        self.model = model
        self.data = data
        self.slowdown = slowdown
        self.compute_floor_s = compute_floor_s
        self.emulated_s = 0.0
        self.loss_fn = nn.CrossEntropyLoss()
        self.n_params = param_count(model)

    def flat_params(self) -> torch.Tensor:
        return nn.utils.parameters_to_vector(self.model.parameters()).detach().clone()

    def set_params(self, flat: torch.Tensor) -> None:
        nn.utils.vector_to_parameters(flat, self.model.parameters())

    def gradient(self, flat_params: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, float, float, float]:
        """Gradient of the next batch's mean loss.

        Returns (flat gradient, batch loss, compute seconds including the injected
        slowdown, injected slowdown seconds).
        """
        t0 = time.perf_counter()
        if flat_params is not None:
            self.set_params(flat_params)
        x, y = self.data.next_batch()
        self.model.zero_grad(set_to_none=False)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])
        measured = time.perf_counter() - t0
        base = max(measured, self.compute_floor_s)
        self.emulated_s = base - measured
        extra = (self.slowdown - 1.0) * base
        if self.emulated_s + extra > 0:
            time.sleep(self.emulated_s + extra)
        return grad, float(loss.item()), time.perf_counter() - t0, extra

    @torch.no_grad()
    def evaluate(self, flat_params: torch.Tensor | None = None) -> tuple[float, float]:
        """(accuracy, mean loss) on the held-out test set."""
        if flat_params is not None:
            self.set_params(flat_params)
        logits = self.model(self.data.x_test)
        loss = float(self.loss_fn(logits, self.data.y_test).item())
        acc = float((logits.argmax(1) == self.data.y_test).float().mean().item())
        return acc, loss


def params_digest(flat: torch.Tensor) -> str:
    """SHA-256 of the float32 bytes of a flat parameter vector (bit-for-bit identity)."""
    import hashlib

    return hashlib.sha256(flat.detach().to(torch.float32).contiguous().numpy().tobytes()
                          ).hexdigest()


# --- model parallelism: a deeper MLP and its partition into pipeline stages ------------------

def stack_width(model_size_m: float, layers: int) -> int:
    """Hidden width H of `mlp_stack(model_size_m, layers)`: its parameter count
    (layers - 2) H^2 + (layers + 73) H + 10 (64 -> H, layers - 2 times H -> H, H -> 10,
    with biases) is nearest `model_size_m` x 1e6. `layers` >= 2 Linear layers."""
    if layers < 2:
        raise ValueError(f"layers must be >= 2, got {layers}")
    target = model_size_m * 1e6
    a, b = layers - 2, INPUTS + 1 + (layers - 2) + CLASSES  # = layers + 73
    if a == 0:
        return max(1, round((target - CLASSES) / b))
    return max(1, round((-b + math.sqrt(b * b + 4 * a * (target - CLASSES))) / (2 * a)))


def mlp_stack(model_size_m: float, layers: int, seed: int) -> nn.Sequential:
    """The digits MLP with `layers` Linear layers (64 -> H -> ... -> H -> 10, ReLU between
    them), about `model_size_m` million parameters, initialised from `seed`: He
    (Kaiming-normal) weights and zero biases, because PyTorch's default initialisation
    shrinks the signal layer by layer and an 8-layer stack then barely learns (measured:
    loss still 2.30 after 30 steps at lr 0.5, vs 1.2 with He at lr 0.1)."""
    h = stack_width(model_size_m, layers)
    widths = [INPUTS] + [h] * (layers - 1) + [CLASSES]
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    mods: list[nn.Module] = []
    for i in range(layers):
        lin = nn.Linear(widths[i], widths[i + 1])
        nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
        nn.init.zeros_(lin.bias)
        mods.append(lin)
        if i < layers - 1:
            mods.append(nn.ReLU())
    model = nn.Sequential(*mods)
    torch.random.set_rng_state(gen_state)
    return model


def partition(layers: int, stages: int) -> list[range]:
    """Contiguous Linear-layer indices of each pipeline stage: `layers` split into
    `stages` runs whose lengths differ by at most one (the first stages take the extra
    layer). Every layer is in exactly one stage; every stage has at least one."""
    if not 1 <= stages <= layers:
        raise ValueError(f"stages must be from 1 to layers ({layers}), got {stages}")
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def stage_module(model: nn.Sequential, layers: range) -> nn.Sequential:
    """The modules of `mlp_stack`'s model that hold Linear layers `layers` (each with the
    ReLU that follows it, none after the last layer). Shares the model's parameters."""
    linear = [i for i, m in enumerate(model) if isinstance(m, nn.Linear)]
    first = linear[layers.start]
    end = linear[layers.stop] if layers.stop < len(linear) else len(model)
    return nn.Sequential(*list(model)[first:end])
