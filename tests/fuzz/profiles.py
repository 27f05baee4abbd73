"""Hypothesis profiles of the fuzz tests.

* ``fuzz-ci`` (:data:`CI_PROFILE`, used unless ``--hypothesis-profile`` names a profile):
  derandomized (a fixed seed per test), :data:`CI_EXAMPLES` examples, no deadline, no example
  database. A passing run takes about two minutes on two cores; a failing one adds
  hypothesis' shrinking (at most five minutes).
* ``long`` (:data:`LONG_PROFILE`): 10,000 random examples with the example database, for
  local runs: ``.venv/bin/python -m pytest tests/fuzz --hypothesis-profile=long``.

Both are registered when this module is imported (``conftest.py`` imports it, early enough
for the hypothesis plugin to find ``long`` when ``tests/fuzz`` is on the command line).
``fuzz-ci`` is applied to the fuzz tests only, through :func:`fuzz_settings`, rather than
loaded for the whole session, so other hypothesis tests keep their own defaults; an explicit
``--hypothesis-profile`` (loaded by the plugin) always wins.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

CI_PROFILE = "fuzz-ci"
LONG_PROFILE = "long"
CI_EXAMPLES = 2500
LONG_EXAMPLES = 10_000
HEALTH_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

#: The ``--hypothesis-profile`` given on the command line (set by ``conftest.py``).
explicit_profile: str | None = None

settings.register_profile(
    CI_PROFILE,
    max_examples=CI_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=HEALTH_CHECKS,
)
settings.register_profile(
    LONG_PROFILE,
    max_examples=LONG_EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=HEALTH_CHECKS,
)


def fuzz_settings() -> settings:
    """Settings of a fuzz test: the explicit ``--hypothesis-profile`` if any, else ``fuzz-ci``."""
    if explicit_profile:
        return settings()  # the current default: the profile the plugin loaded
    return settings(settings.get_profile(CI_PROFILE))
