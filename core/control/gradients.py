"""Gradients of the control ops ``Do``, ``If`` and ``While``: importing this registers them.

Source: Caffe2 ``control_ops_grad.py`` (spec §3.2-§3.6). :func:`core.ops.load_all` imports
this module; it registers the three gradient makers and the renamers of their gradient ops
in :mod:`core.registry`, where the backward pass finds them. The parts:

* :mod:`core.control.subnets` - what the makers share: ``Do`` bindings (``check_do``),
  ``dedupe_g_output``, sub-net gradients through the registered backward pass;
* :mod:`core.control.do_maker`, :mod:`core.control.if_maker`,
  :mod:`core.control.while_maker` - one maker each (spec §3.3, §3.4, §3.5);
* :mod:`core.control.renaming` - renaming the outer blobs gradient control ops read and
  write (spec §3.6; issue 3 and issue 7).

Corrected upstream defects (spec §3.8) are listed in each maker's module.

``RecurrentNetwork`` (issue 9) plugs in the same way from its own modules, imported by
:func:`core.ops.load_all`: :mod:`core.control.rnn_maker` (maker, renamers, return-net
hook), :mod:`core.control.rnn_runtime` (executor runtime), :mod:`core.control.rnn_args`.
"""

from __future__ import annotations

from core.control.do_maker import do_gradient
from core.control.if_maker import if_gradient
from core.control.renaming import rename_control_input, rename_control_output
from core.control.subnets import (
    INNER_GRAD,
    INNER_GRAD_COPY,
    DoBindings,
    check_do,
    dedupe_g_output,
    net_argument,
    subnet_gradient,
)
from core.control.while_maker import while_gradient

__all__ = [
    "INNER_GRAD",
    "INNER_GRAD_COPY",
    "DoBindings",
    "check_do",
    "dedupe_g_output",
    "do_gradient",
    "if_gradient",
    "net_argument",
    "rename_control_input",
    "rename_control_output",
    "subnet_gradient",
    "while_gradient",
]
