"""Character-level LSTM for next-character prediction (federated Shakespeare).

Architecture: token ids ``[batch, T]`` -> embedding ``embed_dim`` -> LSTM layers
(``hidden``, one ``lax.scan`` over time each) -> dense to ``num_classes`` logits,
read from the **last position** only: the Shakespeare loader
(:mod:`ldpsim._src.data.shakespeare`) gives one label per window (the character after
it), and the engine's loss is ``softmax_cross_entropy_with_integer_labels`` on
``[batch, classes]`` logits.

The LSTM cell (Hochreiter & Schmidhuber 1997, with a forget gate, no peepholes),
gates in the order ``i, f, g, o``::

    z = x_t @ W_in + h @ W_hid + b          # [batch, 4h]
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h' = sigmoid(o) * tanh(c')

``x_t @ W_in + b`` is computed for every position in one matmul before the scan;
the scan only does the recurrent ``h @ W_hid``.  Parameters per layer:
``4 * (h * (in + h) + h)``, the same as Keras / TFF / flax ``LSTMCell`` (one bias).

Padding is exact: a position whose token is ``pad_id`` (0, the loader's PAD) leaves
every layer's ``(h, c)`` unchanged (``jnp.where``, not a multiplication), so a
left-padded window computes the recurrence of its real tokens alone (however many
PADs precede them; only the float rounding of batched matmuls may differ between
array shapes), the PAD embedding row never influences the logits (its gradient is
exactly zero), and an all-PAD row (the engine zeroes masked batch rows) yields the
output bias.  Rows are independent (no batch statistics).

Inputs may be integer token ids or float32 holding integers (the engine casts the
inputs to float32); they are rounded and cast to int32.  Ids outside
``[0, vocab_size)``, negative ones included, give NaN logits, never a silent clip
or wrap-around.

Registered models (:func:`ldpsim.models.get_model`):

* ``"lstm_fedavg"``: McMahan et al. 2017 (arXiv:1602.05629, Section 3, Shakespeare):
  embedding 8, two LSTM layers of 256.  With the loader's 90-token vocabulary
  (``vocab_size = num_classes = 90``) it has **820,522** parameters:
  ``90*8 + 4*(256*(8+256)+256) + 4*(256*(256+256)+256) + 256*90+90``
  = 720 + 271,360 + 525,312 + 23,130.  (LEAF's reference model, 80 characters:
  817,872.  The paper quotes 866,578, which this cell gives for no vocabulary size;
  arithmetically it is 258 tokens plus peephole weights, 3h per layer, which we do
  not use.)
* ``"char_lstm"``: the CPU default, embedding 8 and one LSTM layer of 128:
  **82,474** parameters for 90 tokens (720 + 70,144 + 11,610).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.models._base import Model

__all__ = ["PAD_ID", "CharLSTM", "LSTMLayer", "char_lstm", "lstm_fedavg", "lstm_num_params",
           "lstm_scan", "lstm_scan_reference"]

#: The padding token id (``ldpsim._src.data.shakespeare.PAD``).
PAD_ID = 0

# lax.scan unroll over time.  Measured (2-core CPU, shared with other jobs, jax 0.10.2):
# char_lstm local steps (B=16, T=80) vmapped over 16 clients, ms per client step:
# unroll 1: 35, 4: 44, 8: 86, 16: 161 (and compile time grows with it).
_UNROLL = 1


def _recurrent_init(hidden: int):
    """Orthogonal ``[h, h]`` block per gate (as flax's ``LSTMCell``), side by side: ``[h, 4h]``."""
    orth = nn.initializers.orthogonal()

    def init(key, shape, dtype=jnp.float32):
        assert shape == (hidden, 4 * hidden), shape
        return jnp.concatenate([orth(k, (hidden, hidden), dtype)
                                for k in jax.random.split(key, 4)], axis=1)

    return init


def _bias_init(hidden: int, forget_bias: float):
    """Zeros, except ``forget_bias`` for the forget gate (Jozefowicz et al. 2015)."""
    def init(key, shape, dtype=jnp.float32):
        del key
        return jnp.zeros(shape, dtype).at[hidden:2 * hidden].set(forget_bias)

    return init


def _gates(z: jax.Array, h: int) -> tuple[jax.Array, ...]:
    """``i, f, g, o`` activations of the pre-activations ``z [..., 4h]``."""
    return (jax.nn.sigmoid(z[..., :h]), jax.nn.sigmoid(z[..., h:2 * h]),
            jnp.tanh(z[..., 2 * h:3 * h]), jax.nn.sigmoid(z[..., 3 * h:]))


def lstm_scan_reference(pre: jax.Array, w_hid: jax.Array, keep: jax.Array,
                        unroll: int = 1) -> jax.Array:
    """The LSTM recurrence, differentiated by JAX's autodiff (the reference).

    Args:
      pre: ``[T, B, 4h]`` input pre-activations ``x_t @ W_in + b`` (time-major).
      w_hid: ``[h, 4h]`` recurrent kernel.
      keep: bool ``[T, B, 1]``; False (PAD) keeps ``(h, c)`` unchanged at that position.
      unroll: ``lax.scan`` unroll.

    Returns:
      ``hs [T, B, h]``: ``h`` after each position, from ``h = c = 0``.
    """
    steps, batch, four_h = pre.shape
    h_dim = four_h // 4

    def cell(carry, inp):
        h, c = carry
        z_t, k_t = inp
        i, f, g, o = _gates(z_t + h @ w_hid, h_dim)
        c_new = f * c + i * g
        h_new = o * jnp.tanh(c_new)
        h, c = jnp.where(k_t, h_new, h), jnp.where(k_t, c_new, c)
        return (h, c), h

    zeros = jnp.zeros((batch, h_dim), pre.dtype)
    return lax.scan(cell, (zeros, zeros), (pre, keep), unroll=unroll)[1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def lstm_scan(pre: jax.Array, w_hid: jax.Array, keep: jax.Array, unroll: int = 1) -> jax.Array:
    """:func:`lstm_scan_reference` with a hand-written backward pass (same values).

    The backward scan only propagates ``dh, dc`` through time (one ``dz @ W_hid.T`` per
    step) and emits ``dz_t``; the kernel gradient ``sum_t h_{t-1}.T @ dz_t`` is then one
    ``[h, T*B] @ [T*B, 4h]`` matmul after the loop, instead of XLA's in-loop accumulation
    of autodiff.  PAD positions get ``dz = 0`` exactly and pass ``dh, dc`` through.
    """
    return _lstm_fwd(pre, w_hid, keep, unroll)[0]


def _lstm_fwd(pre, w_hid, keep, unroll):
    steps, batch, four_h = pre.shape
    h_dim = four_h // 4

    def cell(carry, inp):
        h, c = carry
        z_t, k_t = inp
        i, f, g, o = _gates(z_t + h @ w_hid, h_dim)
        c_new = f * c + i * g
        tanh_c = jnp.tanh(c_new)
        h_new = o * tanh_c
        h_out, c_out = jnp.where(k_t, h_new, h), jnp.where(k_t, c_new, c)
        return (h_out, c_out), (h_out, c, jnp.concatenate([i, f, g, o], -1), tanh_c)

    zeros = jnp.zeros((batch, h_dim), pre.dtype)
    _, (hs, c_prev, gates, tanh_c) = lax.scan(cell, (zeros, zeros), (pre, keep), unroll=unroll)
    return hs, (hs, c_prev, gates, tanh_c, w_hid, keep)


def _lstm_bwd(unroll, res, d_hs):
    hs, c_prev, gates, tanh_c, w_hid, keep = res
    steps, batch, h_dim = hs.shape
    w_t = w_hid.T

    def cell(carry, inp):
        dh, dc = carry
        dh_out, cp, gt, tc, k_t = inp
        dh = dh + dh_out
        i, f, g, o = (gt[:, k * h_dim:(k + 1) * h_dim] for k in range(4))
        dc_new = dc + dh * o * (1.0 - tc * tc)
        dz = jnp.concatenate([dc_new * g * i * (1.0 - i), dc_new * cp * f * (1.0 - f),
                              dc_new * i * (1.0 - g * g), dh * tc * o * (1.0 - o)], -1)
        dz = jnp.where(k_t, dz, 0.0)
        return (jnp.where(k_t, dz @ w_t, dh), jnp.where(k_t, dc_new * f, dc)), dz

    zeros = jnp.zeros((batch, h_dim), hs.dtype)
    _, dz = lax.scan(cell, (zeros, zeros), (d_hs, c_prev, gates, tanh_c, keep), reverse=True,
                     unroll=unroll)
    h_prev = jnp.concatenate([jnp.zeros_like(hs[:1]), hs[:-1]], axis=0)
    d_w = jnp.einsum("tbh,tbg->hg", h_prev, dz)
    return dz, d_w, None


lstm_scan.defvjp(lambda pre, w, keep, unroll: _lstm_fwd(pre, w, keep, unroll), _lstm_bwd)


class LSTMLayer(nn.Module):
    """One LSTM layer over ``[batch, T, in]``; PAD positions keep the state (module doc)."""

    features: int
    forget_bias: float = 1.0
    unroll: int = _UNROLL
    return_sequences: bool = True
    manual_grad: bool = True

    @nn.compact
    def __call__(self, xs: jax.Array, keep: jax.Array) -> jax.Array:
        """``xs`` float ``[B, T, in]``, ``keep`` bool ``[B, T]`` (False at PAD).

        Returns ``[B, T, h]`` (each position's ``h``; a PAD position repeats the previous
        one) or, with ``return_sequences=False``, the final ``h`` ``[B, h]``.
        """
        h_dim = self.features
        w_in = self.param("kernel_in", nn.initializers.lecun_normal(),
                          (xs.shape[-1], 4 * h_dim), jnp.float32)
        w_hid = self.param("kernel_hidden", _recurrent_init(h_dim), (h_dim, 4 * h_dim),
                           jnp.float32)
        bias = self.param("bias", _bias_init(h_dim, self.forget_bias), (4 * h_dim,),
                          jnp.float32)
        # Input projection for all positions at once, time-major for the scan.
        pre = jnp.einsum("bti,ig->tbg", xs, w_in) + bias        # [T, B, 4h]
        keep_t = jnp.transpose(keep)[:, :, None]                 # [T, B, 1]
        scan = lstm_scan if self.manual_grad else lstm_scan_reference
        hs = scan(pre, w_hid, keep_t, max(1, min(self.unroll, pre.shape[0])))
        return jnp.transpose(hs, (1, 0, 2)) if self.return_sequences else hs[-1]


class CharLSTM(nn.Module):
    """Embedding -> LSTM layers -> dense logits at the last position (module docstring)."""

    vocab_size: int
    num_classes: int
    embed_dim: int = 8
    hidden: Sequence[int] = (128,)
    pad_id: int = PAD_ID
    forget_bias: float = 1.0
    unroll: int = _UNROLL
    manual_grad: bool = True

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        # Out-of-range ids (negative too) -> vocab_size, which jnp.take fills with NaN.
        tokens = jnp.where((tokens >= 0) & (tokens < self.vocab_size), tokens, self.vocab_size)
        keep = tokens != self.pad_id
        x = nn.Embed(self.vocab_size, self.embed_dim, name="embed")(tokens)
        last = len(self.hidden) - 1
        for l, h in enumerate(self.hidden):
            x = LSTMLayer(h, self.forget_bias, self.unroll, return_sequences=l < last,
                          manual_grad=self.manual_grad, name=f"lstm{l}")(x, keep)
        return nn.Dense(self.num_classes, name="out")(x)


def _tokens(x) -> jax.Array:
    """``[batch, ...]`` ids (int, or float holding integers) -> int32 ``[batch, T]``."""
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.round(x)
    return x.astype(jnp.int32).reshape(x.shape[0], -1)


def lstm_num_params(vocab_size: int, num_classes: int, embed_dim: int,
                    hidden: Sequence[int]) -> int:
    """Closed-form parameter count: embedding + ``4(h(in+h)+h)`` per layer + dense."""
    total, fan_in = vocab_size * embed_dim, embed_dim
    for h in hidden:
        total += 4 * (h * (fan_in + h) + h)
        fan_in = h
    return total + fan_in * num_classes + num_classes


def _build(name: str, *, input_shape: tuple[int, ...], num_classes: int, embed_dim: int,
           hidden: Sequence[int], vocab_size: int | None, pad_id: int, forget_bias: float,
           unroll: int, manual_grad: bool) -> Model:
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 1:
        raise LdpsimError(f"{name} needs token sequences of shape (seq_len,), but the inputs have "
                          f"shape {input_shape!r}: use 'lenet5', 'mlp' or 'logreg' (or 'auto')")
    check_positive_int("seq_len", shape[0])
    if int(num_classes) < 2:
        raise LdpsimError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    vocab = int(num_classes) if vocab_size is None else check_positive_int("vocab_size",
                                                                           vocab_size)
    embed_dim = check_positive_int("embed_dim", embed_dim)
    hidden = tuple(check_positive_int("hidden", h) for h in hidden)
    if not hidden:
        raise LdpsimError(f"{name} needs at least one LSTM layer, got hidden={hidden!r}")
    if not 0 <= int(pad_id) < vocab:
        raise LdpsimError(f"pad_id must lie in [0, vocab_size={vocab}), got {pad_id!r}")
    unroll = check_positive_int("unroll", unroll)
    module = CharLSTM(vocab, int(num_classes), embed_dim, hidden, int(pad_id),
                      float(forget_bias), unroll, bool(manual_grad))

    # The params depend neither on the batch nor on the length: trace one token, not T
    # steps, in ONE jitted program (eagerly, the initializers' ops compiled one by one:
    # ~7 CPU-seconds per new width).
    init_params = jax.jit(lambda key: module.init(key, jnp.zeros((1, 1), jnp.int32))["params"])

    def init(key, sample_x):
        del sample_x  # unused: no param shape depends on the batch or the length
        return init_params(key)

    def apply(params, x):
        return module.apply({"params": params}, _tokens(x))

    config = dict(embed_dim=embed_dim, hidden=hidden, vocab_size=vocab, pad_id=int(pad_id),
                  forget_bias=float(forget_bias), unroll=unroll, manual_grad=bool(manual_grad))
    return Model(init, apply, name, shape, int(num_classes), config)


def char_lstm(*, input_shape: tuple[int, ...] = (80,), num_classes: int = 90,
              embed_dim: int = 8, hidden: Sequence[int] = (128,), vocab_size: int | None = None,
              pad_id: int = PAD_ID, forget_bias: float = 1.0, unroll: int = _UNROLL,
              manual_grad: bool = True) -> Model:
    """Small character LSTM (CPU default for token sequences): 82,474 params for 90 tokens.

    Args:
      input_shape: ``(seq_len,)``; ``apply`` accepts any length ``T`` (``[batch, T]``).
      num_classes: output classes (the vocabulary for next-character prediction).
      embed_dim: embedding width.
      hidden: LSTM widths, one per layer.
      vocab_size: input vocabulary (default ``num_classes``: inputs and labels share it).
      pad_id: the padding token, skipped exactly (module docstring).
      forget_bias: initial forget-gate bias.
      unroll: ``lax.scan`` unroll over time (speed only; the function is the same).
      manual_grad: differentiate the recurrence with the hand-written backward pass of
        :func:`lstm_scan` (default; faster on CPU) or with JAX autodiff
        (:func:`lstm_scan_reference`, also supports forward-mode AD); same gradients up
        to float rounding.
    """
    return _build("char_lstm", input_shape=input_shape, num_classes=num_classes,
                  embed_dim=embed_dim, hidden=hidden, vocab_size=vocab_size, pad_id=pad_id,
                  forget_bias=forget_bias, unroll=unroll, manual_grad=manual_grad)


def lstm_fedavg(*, input_shape: tuple[int, ...] = (80,), num_classes: int = 90,
                embed_dim: int = 8, hidden: Sequence[int] = (256, 256),
                vocab_size: int | None = None, pad_id: int = PAD_ID, forget_bias: float = 1.0,
                unroll: int = _UNROLL, manual_grad: bool = True) -> Model:
    """McMahan et al. 2017's Shakespeare LSTM (embedding 8, 2 x 256): 820,522 params for 90 tokens.

    Reference: McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data", AISTATS 2017 (arXiv:1602.05629), Section 3.  Arguments as
    :func:`char_lstm`.
    """
    return _build("lstm_fedavg", input_shape=input_shape, num_classes=num_classes,
                  embed_dim=embed_dim, hidden=hidden, vocab_size=vocab_size, pad_id=pad_id,
                  forget_bias=forget_bias, unroll=unroll, manual_grad=manual_grad)
