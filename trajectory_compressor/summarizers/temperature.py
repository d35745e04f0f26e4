"""Which sampling temperature a chat request carries, by model.

Kimi / Moonshot models choose their temperature server-side (thinking and non-thinking
modes differ) and a client-sent value can conflict with that choice; the reference leaves
the field out for them (its `_is_kimi_model`: the model name's last ``/``-segment, lower
case, is ``kimi`` or starts with ``kimi-``). A configured temperature of None
(``summarization.temperature: null``) leaves it out for every model.
"""

from __future__ import annotations


def omits_temperature(model: str) -> bool:
    """Whether ``model`` takes no client temperature (the Kimi family)."""
    bare = model.strip().lower().rsplit("/", 1)[-1]
    return bare == "kimi" or bare.startswith("kimi-")


def request_temperature(model: str, temperature: float | None) -> float | None:
    """The temperature to send to ``model``, or None to send none."""
    if temperature is None or omits_temperature(model):
        return None
    return temperature
