"""Op cases generated from torch's OpInfo database, rule family `pointwise`: see
docs/strength.md, "Generated cases". Written by `python -m meshtest generate opinfo`;
edit the generator, not this file."""
from meshtest import register_generated

register_generated(manifest="manifest_pointwise_level1_7.json")
