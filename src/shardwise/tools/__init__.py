"""Tools for data that exists already: ``reshard`` (and ``migrate``, the 2022 draft's
repack), ``inventory`` / ``info``, ``verify``."""
