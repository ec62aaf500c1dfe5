"""The verl plugin's former path, kept because users type it: ``reward.custom_reward_function.path=
pkg://eapo.integrations.verl`` in verl configs and launch scripts, and the ``verl.plugins`` entry point of
earlier installs. It is :mod:`eapo.engines.verl`: importing it registers the same
estimators, trainer and reward function. Its submodules moved there too
(``eapo.integrations.verl.trainer`` -> ``eapo.engines.verl.trainer``; importing the old one says so).
"""

from __future__ import annotations

from eapo.engines.verl import *  # noqa: F403  (the plugin: registers estimators and the trainer)
from eapo.engines.verl import __all__  # noqa: F401
