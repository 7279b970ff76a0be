"""The in-memory dataset object every loader returns."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Dataset"]


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded dataset: model-ready NumPy arrays plus, if natural, its clients.

    Attributes:
      name: canonical dataset name (e.g. ``"mnist"``).
      x_train, x_test: inputs.  Images are float32 in [0, 1] with shape
        ``[n, H, W]`` or ``[n, H, W, C]``; features are float32; character
        sequences (Shakespeare) are int32 token ids ``[n, seq_len]``.
      y_train, y_test: int32 labels in ``[0, num_classes)``.
      num_classes: number of label classes.
      train_client_ids, test_client_ids: for naturally federated datasets
        (FEMNIST, Shakespeare, synthetic), ``int32[n]`` giving the client (writer,
        speaking role, synthetic device) of every example; ``None`` otherwise.
      client_names: names of the natural clients, indexed by client id.
      info: free-form provenance (files read, parameters).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    train_client_ids: np.ndarray | None = None
    test_client_ids: np.ndarray | None = None
    client_names: tuple[str, ...] | None = None
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.x_train.shape[1:])

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.y_test.shape[0])

    @property
    def is_federated(self) -> bool:
        """True when examples carry a natural client id (writer, role, device)."""
        return self.train_client_ids is not None

    @property
    def num_natural_clients(self) -> int | None:
        if self.train_client_ids is None:
            return None
        return len(self.client_names) if self.client_names else int(self.train_client_ids.max()) + 1

    def __repr__(self) -> str:
        fed = f", natural_clients={self.num_natural_clients}" if self.is_federated else ""
        return (
            f"Dataset({self.name!r}, train={self.num_train}, test={self.num_test}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes}{fed})"
        )
