"""Typed, validated access to config fields. Every failure names the field and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvbudget.errors import ConfigError
from kvbudget.frozen import FrozenRecord
from kvbudget.model.bounds import MAX_LIST, MAX_SIZE, brief, too_large

Config = Mapping[str, object]


@dataclass(frozen=True, repr=False, eq=False)
class Fields(FrozenRecord):
    """A config plus where it came from, so errors can say ``<source>: field 'x' ...``."""

    cfg: Config
    where: str

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def positive(self, key: str, default: int | None = None) -> int:
        """A required positive integer (or ``default`` when absent)."""
        value = self.cfg.get(key)
        if value is None:
            if default is not None:
                return default
            raise self.error(f"field '{key}' is missing; add it from the model's config.json")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"field '{key}' must be a whole number, got {brief(value)}")
        if isinstance(value, float) and not value.is_integer():  # inf and nan are not whole either
            raise self.error(f"field '{key}' must be a whole number, got {value!r}")
        if value <= 0:
            raise self.error(f"field '{key}' must be positive, got {value!r}; fix the config")
        return self._bounded(key, int(value))

    def _bounded(self, key: str, value: int) -> int:
        why = too_large(key, value)
        if why is not None:
            raise self.error(f"field {why}; fix the config")
        return value

    def non_negative(self, key: str, default: int = 0) -> int:
        """A whole number >= 0 (``default`` when absent or null)."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(f"field '{key}' must be a whole number >= 0, got {brief(value)}")
        return self._bounded(key, value)

    def optional_positive(self, key: str) -> int | None:
        if self.cfg.get(key) is None:
            return None
        return self.positive(key)

    def int_list(self, key: str) -> list[int]:
        value = self.cfg.get(key)
        if (
            not isinstance(value, list)
            or len(value) > MAX_LIST
            or not all(isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_SIZE for v in value)
        ):
            raise self.error(f"field '{key}' must be a list of layer indices, got {brief(value)}")
        return [int(v) for v in value]

    def str_list(self, key: str) -> list[str]:
        value = self.cfg.get(key)
        if not isinstance(value, list) or len(value) > MAX_LIST or not all(isinstance(v, str) for v in value):
            raise self.error(f"field '{key}' must be a list of strings, got {brief(value)}")
        return [str(v) for v in value]

    def string(self, key: str) -> str:
        value = self.cfg.get(key)
        if not isinstance(value, str) or not value:
            raise self.error(f"field '{key}' must be a non-empty string, got {brief(value)}")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"field '{key}' must be true or false, got {brief(value)}")
        return value

    def num_layers(self) -> int:
        return self.positive("num_hidden_layers")

    def attention_heads(self) -> int:
        return self.positive("num_attention_heads")

    def kv_heads(self) -> int:
        """KV heads; absent means multi-head attention (HF convention), and it must divide the query heads."""
        heads = self.attention_heads()
        kv = self.positive("num_key_value_heads", default=heads)
        if heads % kv:
            raise self.error(
                f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}; "
                "grouped-query attention needs whole groups"
            )
        return kv

    def head_dim(self) -> int:
        """``head_dim`` (or ``attention_head_dim``) when set, else hidden_size / num_attention_heads."""
        for key in ("head_dim", "attention_head_dim"):
            if self.cfg.get(key) is not None:
                return self.positive(key)
        hidden = self.positive("hidden_size")
        heads = self.attention_heads()
        if hidden % heads:
            raise self.error(
                f"hidden_size {hidden} is not divisible by num_attention_heads {heads} and no head_dim is given; "
                "add 'head_dim' to the config"
            )
        return hidden // heads

    def dtype(self) -> str | None:
        for key in ("torch_dtype", "dtype"):
            value = self.cfg.get(key)
            if isinstance(value, str):
                return value
        return None

    def state_dtype(self, key: str) -> str | None:
        """A recurrent-state dtype pin (e.g. mamba_ssm_cache_dtype); None or 'auto' means model dtype."""
        value = self.cfg.get(key)
        if value is None or value == "auto":
            return None
        if not isinstance(value, str):
            raise self.error(f"field '{key}' must be a dtype name, got {value!r}")
        return value
