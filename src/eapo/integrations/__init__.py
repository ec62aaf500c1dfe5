"""Former home of the engine adapters, now :mod:`eapo.engines`. ``eapo.integrations.verl`` stays as an
alias of :mod:`eapo.engines.verl` because verl configs name it (``pkg://eapo.integrations.verl``)."""
