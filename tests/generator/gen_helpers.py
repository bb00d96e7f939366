"""Shared test values for the generator tests (importable: this directory is on sys.path)."""

from hangwatch.generator.engines.toy_model import ToyConfig

CONFIG = ToyConfig()


def fake_kwargs(**extra):
    return {"fake_model_config": CONFIG.to_json(), "enable_sleep_mode": True, **extra}


def named(model):
    """A model's parameters as (name, tensor) pairs, as the generator stages them."""
    return [(n, p.detach()) for n, p in model.named_parameters()]
