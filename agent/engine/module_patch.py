"""Routing a name in an mlx-lm model module to a replacement, reversibly.

mlx-lm's model modules (llama, qwen2, ...) look up helpers such as
`scaled_dot_product_attention` and `swiglu` by module-level name at call time, so replacing
that name changes every model of that architecture in the process. `ModulePatch` does this
for one name, only where the module still uses mlx-lm's stock function (a model with its own
implementation is left alone), and remembers the original so it can be put back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class ModulePatch:
    def __init__(self, name: str, stock: Callable, replacement: Callable):
        self.name, self.stock, self.replacement = name, stock, replacement
        self._saved: dict[str, Callable] = {}  # model module name -> the function it had before

    def install(self, model: Any) -> bool:
        """Route `model`'s module to the replacement; True if it is routed (now or already)."""
        module_name = type(model).__module__
        module = sys.modules.get(module_name)
        current = getattr(module, self.name, None)
        if current is self.replacement:
            return True
        if current is not self.stock:
            return False
        self._saved[module_name] = current
        setattr(module, self.name, self.replacement)
        return True

    def uninstall(self, model: Any) -> None:
        """Undo `install` for `model`'s module (for every model of that architecture)."""
        module_name = type(model).__module__
        original = self._saved.pop(module_name, None)
        if original is not None:
            setattr(sys.modules[module_name], self.name, original)

    def installed(self, model: Any) -> bool:
        module = sys.modules.get(type(model).__module__)
        return getattr(module, self.name, None) is self.replacement
