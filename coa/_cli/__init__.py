"""Command modules of the ``coa`` command line, registered by :mod:`coa.cli`."""
