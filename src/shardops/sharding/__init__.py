"""One module per operator: each registers the DTensor sharding of one operator
(``torch.distributed.tensor.experimental.register_sharding``). Found and imported by
:func:`shardops.load_sharding`; nothing here imports them by name."""
