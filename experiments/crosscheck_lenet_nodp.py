"""Cross-check of the no-DP MindArmour setting with none of ldpsim's training code.

Plain flax ``nn.Conv``/``nn.Dense`` LeNet-5 (VALID convolutions on 32x32 inputs, flax default
init), ``optax.sgd(0.01, momentum=0.9)``, batch 256, 234 steps per epoch (remainder dropped),
a fresh permutation per epoch, 10 epochs; MNIST resized bilinearly to 32x32 and standardised
with (0.1307, 0.3081).  Only the IDX loader (``ldpsim.data.load_dataset``) is shared.  Prints
the test accuracy after every epoch, to compare with
``ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --no-dp``.

Usage::

    LDPSIM_DATA_DIR=../shared/data python experiments/crosscheck_lenet_nodp.py [SEED]

On this 2-core CPU the XLA convolutions make it ~10x slower than ldpsim's trainer
(100-200 s per epoch under load).
"""
import sys, time, jax, jax.numpy as jnp, flax.linen as nn, optax
from ldpsim.data import load_dataset
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
ds = load_dataset("mnist")
def prep(x):
    x = jnp.asarray(x, jnp.float32)
    if x.ndim == 3: x = x[..., None]
    x = jax.image.resize(x, (x.shape[0], 32, 32, 1), "bilinear")
    return (x - 0.1307) / 0.3081
xtr, ytr = prep(ds.x_train), jnp.asarray(ds.y_train)
xte, yte = prep(ds.x_test), jnp.asarray(ds.y_test)
class L(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(6, (5, 5), padding="VALID")(x)), (2, 2), (2, 2))
        x = nn.max_pool(nn.relu(nn.Conv(16, (5, 5), padding="VALID")(x)), (2, 2), (2, 2))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(120)(x)); x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(10)(x)
m = L(); p = m.init(jax.random.key(seed), xtr[:1]); tx = optax.sgd(0.01, momentum=0.9); s = tx.init(p)
def loss(p, xb, yb): return optax.softmax_cross_entropy_with_integer_labels(m.apply(p, xb), yb).mean()
@jax.jit
def epoch(p, s, perm):
    def step(c, idx):
        p, s = c; g = jax.grad(loss)(p, xtr[idx], ytr[idx]); u, s = tx.update(g, s, p)
        return (optax.apply_updates(p, u), s), None
    return jax.lax.scan(step, (p, s), perm)[0]
@jax.jit
def acc(p): return jnp.mean(jnp.argmax(m.apply(p, xte), -1) == yte)
for e in range(10):
    perm = jax.random.permutation(jax.random.key(1000 + 17 * seed + e), xtr.shape[0])[:234 * 256].reshape(234, 256)
    t = time.time(); p, s = epoch(p, s, perm); print(e + 1, float(acc(p)), round(time.time() - t, 1), flush=True)
