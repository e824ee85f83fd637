"""The image path: real-data check of docs/theory/images.md#images.

With a medium initialisation scale, l2-SAM makes a CNN attend to dark background and
weak features that GD ignores. This subpackage makes that measurable:

- :mod:`samflow.images.data`: find MNIST, CIFAR-10 and SVHN in a data directory.
- :mod:`samflow.images.formats`: read their files (IDX, npz, CIFAR pickles through a
  safe unpickler, SVHN .mat).
- :mod:`samflow.images.tasks`: binary tasks (two classes or groups, labels in
  {-1, +1}, subsampling, standardised inputs).
- :mod:`samflow.images.download`: ``samflow data download``: checked, resumable fetch.
- :mod:`samflow.images.models`: the small CNN (an ``eqx.Module``) and the L = 2 diagonal
  network on flattened pixels (the bridge to the theory), behind one interface.
- :mod:`samflow.images.attribution`: Grad-CAM, input-gradient saliency, background share.
- :mod:`samflow.images.train`: training with the engine's own step
  (:func:`samflow.steps.step`) and runner (:class:`samflow.Discrete`), a host loop or
  the engine's record loop; metrics at a schedule.
- :mod:`samflow.images.results`: the labelled result file (xarray, written atomically).
- :mod:`samflow.images.plot`: the input / GD Grad-CAM / SAM Grad-CAM figure.
- :mod:`samflow.images.experiment`: :func:`study`, the whole study as one call
  (what ``samflow cnn`` runs), and its printed summary.
- The ``samflow cnn`` and ``samflow data`` subcommands live in :mod:`samflow.commands.cnn`.

Images are float32 throughout; nothing here enables x64.
"""

from samflow.images.experiment import study

__all__ = ["study"]
