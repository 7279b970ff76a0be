"""The manifest of a run or a sweep: what ran, with what, where, and what it guarantees.

``ldpsim run --out R.csv``, ``ldpsim sweep --out R.csv`` and ``ldpsim dpsgd --out R.csv``
write ``R.manifest.json`` beside the CSV (:func:`manifest_path`): JSON, written atomically
(temporary file renamed over the old one) when the command starts (``"status":
"running"``), updated as it goes (a sweep: after every finished cell) and when it ends
(``"finished"``, ``"interrupted"`` by SIGINT/SIGTERM, or ``"failed"``), with ``ended_at``.

Fields (every one present; a value that cannot be known is ``null``):

``ldpsim_manifest``   format number (:data:`FORMAT`).
``kind``              ``"run"``, ``"sweep"`` or ``"dpsgd"``.
``status``, ``started_at``, ``ended_at``, ``wall_seconds``, ``error``
                      ISO 8601 UTC times; ``ended_at`` is null while running; ``error``
                      names the exception of a ``failed`` command (else null).
``command_line``      ``sys.argv`` as a list, ``command`` the same quoted for a shell,
                      ``cwd`` the working folder.
``results``           ``{"csv": path, "rows": rows written by this command}``.
``configuration``     the full resolved configuration: ``run``: every
                      :class:`~ldpsim.fl.SimulationConfig` field (defaults included;
                      :func:`simulation_config` turns it back into one); ``sweep``: name,
                      fingerprint, the normalised grid and fixed settings
                      (:meth:`~ldpsim.sweep.SweepConfig.normalized`) and the cell keys;
                      ``dpsgd``: the DP-SGD configuration.
``resolved``          what the configuration left to the data, as it ran: ``run``:
                      ``{"model": ...}`` (``model = "auto"`` resolved); ``sweep``: per
                      finished cell, its model and training settings (the dataset's
                      defaults filled in); null until the first row.
``seeds``             the root seed(s).
``data``              per dataset: name, source, folder and per file its SHA-256 (and the
                      published digest the loader verifies it against; LEAF FEMNIST: the
                      known MD5) -- ``files`` is null for generated data (synthetic).
``privacy``           from the last results row: mechanism, neighbours (the neighbouring
                      relation), epsilon, delta, epsilon_spent, sensitivity and the mode's
                      noise settings, with a one-sentence ``statement``; a sweep has one
                      such record per finished cell under ``cells``.
``software``          ldpsim version, git commit and whether the work tree had uncommitted
                      changes (null outside a git checkout or without git), Python and the
                      versions of jax, jaxlib, flax, optax, dp-accounting, numpy, scipy.
``hardware``          JAX backend, device kinds and count, process count, CPU model
                      (``/proc/cpuinfo``), CPU count, host name, operating system.
``environment``       the variables that change how JAX/XLA/ldpsim run (``XLA_FLAGS``,
                      ``JAX_*``, ``LDPSIM_*``, ``CUDA_VISIBLE_DEVICES``).
``earlier_sessions``  a resumed sweep: the status, times, command line and software of
                      each earlier invocation that wrote the same results file.

Non-finite numbers are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict
JSON has no literal for them).

The package, by concern: :mod:`~ldpsim._src._manifest.jsonfile` (the file: its path, strict
JSON, the atomic write, the read), :mod:`~ldpsim._src._manifest.facts` (software, hardware,
environment, the datasets' checksums), :mod:`~ldpsim._src._manifest.guarantee` (the privacy
record), :mod:`~ldpsim._src._manifest.recorder` (a command's manifest from its start to its
end) and :mod:`~ldpsim._src._manifest.recreate` (a run's configuration read back).
"""

from ldpsim._src._manifest.facts import PACKAGES, dataset_record
from ldpsim._src._manifest.guarantee import PRIVACY_COLUMNS, guarantee
from ldpsim._src._manifest.jsonfile import FORMAT, load, manifest_path, write
from ldpsim._src._manifest.recorder import Recorder, collect
from ldpsim._src._manifest.recreate import simulation_config

__all__ = ["FORMAT", "PACKAGES", "PRIVACY_COLUMNS", "Recorder", "collect", "dataset_record",
           "guarantee", "load", "manifest_path", "simulation_config", "write"]
