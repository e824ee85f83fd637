"""Sweeps over grids: the axes and the grid (:mod:`.axes`), what defines a sweep and
its points (:mod:`.spec`), and the resumable store with its file schema
(:mod:`.store`). The compiled program is :mod:`samflow.engine`'s; devices and
processes are :mod:`samflow.devices`'. The public entry is :func:`samflow.sweep`."""
