"""Configuration: string key/value options, as PyFlink's ``pyflink.common.Configuration``.

Values are stored as strings, the way Flink keeps them in its configuration files, and
typed getters parse them; so ``set_integer`` then ``get_string`` gives the text form.

>>> conf = Configuration()
>>> conf.set_integer("parallelism.default", 4)
Configuration({'parallelism.default': '4'})
>>> conf.get_integer("parallelism.default", 1)
4
>>> conf.get_boolean("missing", True)
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flinkpy.errors import ConfigurationError

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class Configuration:
    """A mutable map of option keys to string values with typed accessors."""

    def __init__(self, other: Configuration | Mapping[str, object] | None = None) -> None:
        self._data: dict[str, str] = {}
        if isinstance(other, Configuration):
            self._data.update(other._data)
        elif other is not None:
            for k, v in other.items():
                self._data[str(k)] = _to_text(v)

    # -- strings ------------------------------------------------------------------------
    def get_string(self, key: str, default_value: str | None) -> str | None:
        return self._data.get(key, default_value)

    def set_string(self, key: str, value: str) -> Configuration:
        self._data[key] = str(value)
        return self

    # -- typed --------------------------------------------------------------------------
    def get_integer(self, key: str, default_value: int) -> int:
        text = self._data.get(key)
        if text is None:
            return default_value
        try:
            return int(text.strip())
        except ValueError:
            raise ConfigurationError(
                f"configuration key {key!r} has value {text!r}, which is not an integer",
                remedy="set it to a whole number",
            ) from None

    def set_integer(self, key: str, value: int) -> Configuration:
        self._data[key] = str(int(value))
        return self

    def get_float(self, key: str, default_value: float) -> float:
        text = self._data.get(key)
        if text is None:
            return default_value
        try:
            return float(text.strip())
        except ValueError:
            raise ConfigurationError(
                f"configuration key {key!r} has value {text!r}, which is not a number",
                remedy="set it to a number such as 0.5",
            ) from None

    def set_float(self, key: str, value: float) -> Configuration:
        self._data[key] = repr(float(value))
        return self

    def get_boolean(self, key: str, default_value: bool) -> bool:
        text = self._data.get(key)
        if text is None:
            return default_value
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigurationError(
            f"configuration key {key!r} has value {text!r}, which is not a boolean",
            remedy="set it to true or false",
        )

    def set_boolean(self, key: str, value: bool) -> Configuration:
        self._data[key] = "true" if value else "false"
        return self

    def get_bytearray(self, key: str, default_value: bytearray) -> bytearray:
        text = self._data.get(key)
        return default_value if text is None else bytearray.fromhex(text)

    def set_bytearray(self, key: str, value: bytes | bytearray) -> Configuration:
        self._data[key] = bytes(value).hex()
        return self

    # -- whole map ------------------------------------------------------------------------
    def key_set(self) -> set[str]:
        return set(self._data)

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def remove_config(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def add_all(self, other: Configuration, prefix: str | None = None) -> Configuration:
        for k, v in other._data.items():
            self._data[(prefix or "") + k] = v
        return self

    def add_all_to_dict(self, target_dict: dict[str, str]) -> None:
        target_dict.update(self._data)

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)

    def items(self) -> Iterable[tuple[str, str]]:
        return self._data.items()

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self._data == other._data

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __deepcopy__(self, memo: dict) -> Configuration:
        return Configuration(self)

    def __repr__(self) -> str:
        return f"Configuration({self._data!r})"


def _to_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
